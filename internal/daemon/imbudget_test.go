package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/im/timlocal"
	"hyapp/room-service/internal/poll"
)

// TestTwoNodesShareTheIMAppBudget runs two service processes of one fleet
// against one Tencent-compatible endpoint that allows budget send_group_msg
// calls per second for the whole app, answering 60007 past it (as Tencent
// does), while mic changes in many rooms through both nodes ask for far
// more. The nodes share the budget through Redis: together they never make
// more than budget calls in any second, and none is refused; both send.
func TestTwoNodesShareTheIMAppBudget(t *testing.T) {
	const budget, sdk, key, admin = 200, 1400000077, "two-node-budget-key", "administrator"
	tim := timlocal.New(timlocal.Config{SDKAppID: sdk, SecretKey: key, Admin: admin, APIRate: budget})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: tim}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	// Its own Redis database: the budget's key is the Tencent app's.
	f := newFleetOn(t, 2, "redis://127.0.0.1:6379/14",
		fmt.Sprint("ROOM_TIM_SDKAPPID=", sdk), "ROOM_TIM_SECRET_KEY="+key, "ROOM_TIM_ADMIN="+admin,
		"ROOM_TIM_ENDPOINT=http://"+ln.Addr().String(), fmt.Sprint("ROOM_TIM_APP_BUDGET=", budget))
	rooms := f.createRooms(30)

	// Each room: a user joins, then takes and leaves seat 0 as fast as the
	// room answers, through both nodes in turn: High events, many more than
	// the budget carries one by one.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []error
	for r, id := range rooms {
		wg.Go(func() {
			user := int64(100 + r)
			do := func(i int, call func(nd *node, ctx context.Context) error) {
				nd := f.nodes[i%len(f.nodes)]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := call(nd, ctx); err != nil {
					mu.Lock()
					failed = append(failed, fmt.Errorf("room %s, step %d: %w", id, i, err))
					mu.Unlock()
				}
			}
			do(0, func(nd *node, ctx context.Context) error {
				_, err := nd.client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: id, CommandId: "join", OperatorUserId: user}))
				return err
			})
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				do(i, func(nd *node, ctx context.Context) error {
					cmd := fmt.Sprint("mic-", i)
					if i%2 == 1 {
						_, err := nd.client.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: id, CommandId: cmd, OperatorUserId: user}))
						return err
					}
					_, err := nd.client.LeaveMic(ctx, connect.NewRequest(&roomv1.LeaveMicRequest{RoomId: id, CommandId: cmd, OperatorUserId: user}))
					return err
				})
			}
		})
	}
	load := time.NewTimer(8 * time.Second) // how long the load runs: a duration, not a condition
	<-load.C
	close(stop)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d mic changes failed, first: %v", len(failed), failed[0])
	}
	// Both nodes sent: each owns some of the rooms.
	poll.Until(t, 30*time.Second, "both nodes sending", func() error {
		for _, nd := range f.nodes {
			if n := scrape(t, nd, `room_im_sent_total{priority="High"}`); n == 0 {
				return fmt.Errorf("node %s sent no High message", nd.id)
			}
		}
		return nil
	})
	st := tim.CallStats("send_group_msg")
	t.Logf("send_group_msg: %d accepted, %d refused, at most %d in one second (budget %d)", st.Accepted, st.Refused, st.MaxPerSecond, budget)
	// The endpoint enforces the budget, so what shows a fleet that does not
	// share it is refusals: half of the calls of two nodes that each spend
	// the whole budget. Jitter between the two processes may bunch a call
	// or two into one second on a loaded machine (they are sent again).
	if st.Refused > max(2, st.Accepted/100) || st.MaxPerSecond > budget || st.Accepted == 0 {
		t.Fatalf("send_group_msg: %+v; want at most 1%% refused and at most %d in any second", st, budget)
	}
}
