package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"hyapp/room-service/cell"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/gift"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
	walletledger "hyapp/room-service/wallet/ledger"
)

// fleet is several nodes on one MariaDB database and one lease table, as
// a fleet shares its database and its lease service.
type fleet struct {
	dsn   string
	table *lease.Local

	mu      sync.Mutex
	holders map[string]string // room id -> id of the node holding its lease
	addrs   map[string]string // node id -> API address
	hops    []*http.Client    // every node's hop client

	hopTimeout time.Duration // the Routing.HopTimeout of the nodes started from now on
}

// closeIdle closes the idle hop connections of every node, so a server
// shutting down does not wait for other nodes to let go of theirs.
func (f *fleet) closeIdle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.hops {
		c.CloseIdleConnections()
	}
}

// shutdown shuts srv down while the other nodes drop their idle hop
// connections, again and again: net/http never sends a GOAWAY to an HTTP/2
// connection that was still reading its preface when Shutdown began, and
// such a connection lives as long as its client keeps it. Calls still
// running are waited for, until ctx ends.
func (f *fleet) shutdown(ctx context.Context, srv *http.Server) error {
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		f.closeIdle()
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
	}
}

func newFleet(t *testing.T) *fleet {
	return &fleet{dsn: mysqltest.DSN(t), table: lease.NewLocal(), holders: map[string]string{}, addrs: map[string]string{}}
}

// holder returns the id of the node that holds the room's lease.
func (f *fleet) holder(roomID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holders[roomID]
}

// nodeLease is one node's view of the fleet's lease table: it records
// which node acquired each room.
type nodeLease struct {
	f    *fleet
	node string
}

func (l nodeLease) Acquire(ctx context.Context, roomID string) (lease.Handle, error) {
	h, err := l.f.table.Acquire(ctx, roomID)
	if err != nil {
		return nil, err
	}
	l.f.mu.Lock()
	l.f.holders[roomID] = l.node
	l.f.mu.Unlock()
	return heldBy{h, l, roomID}, nil
}

type heldBy struct {
	lease.Handle
	l      nodeLease
	roomID string
}

func (h heldBy) Release(ctx context.Context) error {
	h.l.f.mu.Lock()
	if h.l.f.holders[h.roomID] == h.l.node {
		delete(h.l.f.holders, h.roomID)
	}
	h.l.f.mu.Unlock()
	return h.Handle.Release(ctx)
}

// Owner implements rpc.Owners from the lease table, as the daemon's
// adapter does from the fleet's lease service.
func (l nodeLease) Owner(_ context.Context, roomID string, _ []string) (string, bool, error) {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	holder, ok := l.f.holders[roomID]
	if !ok || holder == l.node {
		return "", false, nil
	}
	return l.f.addrs[holder], true, nil
}

// ownersFunc adapts a func to rpc.Owners.
type ownersFunc func(ctx context.Context, roomID string) (string, bool, error)

func (f ownersFunc) Owner(ctx context.Context, roomID string, _ []string) (string, bool, error) {
	return f(ctx, roomID)
}

// node is one room-service node of a fleet: its own database pool, cell
// registry and HTTP server.
type node struct {
	id       string
	addr     string
	reg      *cell.Registry
	rooms    roomv1connect.RoomServiceClient
	hops     *atomic.Int64 // hops this node sent
	shutdown func()        // stops the HTTP server and the registry; idempotent
}

// start starts a node whose calls are routed by owners (nil: by the lease
// table). wrap, if given, wraps its API handler.
func (f *fleet) start(t *testing.T, id string, owners rpc.Owners, wrap ...func(*node, http.Handler) http.Handler) *node {
	t.Helper()
	ctx := context.Background()
	db, err := mysql.Open(ctx, f.dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := walletledger.Of(db, walletledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nl := nodeLease{f: f, node: id}
	if owners == nil {
		owners = nl
	}
	reg := cell.New(cell.Config{NodeID: id, Wallet: ledger, SettleInCommit: true}, db, nl, nopSink{}, nil, quiet)
	catalogue, err := gift.New(gift.DefaultGifts(), gift.Settings{Lucky: gift.DefaultLucky(), MaxPayoutBP: 9500, RegionalThreshold: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	hopClient := rpc.NewHopClient(0)
	hops := new(atomic.Int64)
	rooms := rpc.NewRoomHandler(reg, db, catalogue, noRobots{}, nil, quiet)
	mux := rpc.NewMux(rooms, rpc.NewOperatorHandler(db, nil, quiet), rpc.NewWalletHandler(ledger, quiet), rpc.Options{
		Token: token, Owners: owners, NodeID: id,
		Routing: rpc.Routing{Client: hopClient, Attempts: 5, Backoff: 5 * time.Millisecond, HopTimeout: f.hopTimeout, Metrics: rpc.RoutingMetrics{
			Hop: func(context.Context, time.Duration) { hops.Add(1) },
		}},
	}, quiet)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{id: id, addr: ln.Addr().String(), reg: reg, hops: hops}
	var h http.Handler = mux
	for _, w := range wrap {
		h = w(n, h)
	}
	srv := rpc.NewServer(h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	f.mu.Lock()
	f.addrs[id] = ln.Addr().String()
	f.hops = append(f.hops, hopClient)
	f.mu.Unlock()

	client := &http.Transport{}
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := f.shutdown(ctx, srv); err != nil {
				var stacks strings.Builder
				_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
				t.Errorf("%s: server shutdown: %v; goroutines:\n%s", id, err, stacks.String())
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("%s: serve: %v", id, err)
			}
			if err := reg.Close(ctx); err != nil {
				t.Errorf("%s: registry close: %v", id, err)
			}
		})
	}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		shutdown()
		if err := ledger.Close(); err != nil {
			t.Errorf("%s: ledger close: %v", id, err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("%s: db close: %v", id, err)
		}
	})
	n.shutdown = shutdown
	n.rooms = roomv1connect.NewRoomServiceClient(&http.Client{Transport: client}, "http://"+n.addr, withToken(token))
	return n
}

// createOn creates room r1 through n, so n holds it.
func createOn(t *testing.T, n *node) {
	t.Helper()
	must(t, n.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
}

func TestACallIsServedByItsRoomsOwner(t *testing.T) {
	f := newFleet(t)
	a, b, c := f.start(t, "a", nil), f.start(t, "b", nil), f.start(t, "c", nil)
	createOn(t, a)
	if f.holder("r1") != "a" {
		t.Fatalf("r1 is held by %q, want a", f.holder("r1"))
	}
	join := must(t, b.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2})
	mic := must(t, c.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "mic-2", OperatorUserId: 2, SeatIndex: 3})
	if join.GetRoomVersion() != 2 || mic.GetRoomVersion() != 3 {
		t.Fatalf("versions %d, %d; want 2, 3", join.GetRoomVersion(), mic.GetRoomVersion())
	}
	snap := must(t, b.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1"})
	if snap.GetRoomVersion() != 3 || snap.GetSnapshot().GetSeats()[3].GetUserId() != 2 {
		t.Fatalf("snapshot through b: version %d, seats %v", snap.GetRoomVersion(), snap.GetSnapshot().GetSeats())
	}
	// A refusal is the owner's, unchanged.
	_, err := c.rooms.TakeMic(context.Background(), connect.NewRequest(&roomv1.TakeMicRequest{RoomId: "r1", CommandId: "mic-3", OperatorUserId: 3, SeatIndex: 3}))
	wantErr(t, err, connect.CodeFailedPrecondition, "not_in_room")

	if a.reg.Loaded() != 1 || b.reg.Loaded() != 0 || c.reg.Loaded() != 0 || f.holder("r1") != "a" {
		t.Fatalf("loaded a=%d b=%d c=%d, holder %q; want the room on a only", a.reg.Loaded(), b.reg.Loaded(), c.reg.Loaded(), f.holder("r1"))
	}
	if a.hops.Load() != 0 || b.hops.Load() != 2 || c.hops.Load() != 2 {
		t.Fatalf("hops a=%d b=%d c=%d; want 0, 2, 2", a.hops.Load(), b.hops.Load(), c.hops.Load())
	}
}

func TestAnUnownedRoomIsClaimedWhereTheCallArrives(t *testing.T) {
	f := newFleet(t)
	a, b := f.start(t, "a", nil), f.start(t, "b", nil)
	createOn(t, a)
	a.shutdown() // releases r1
	must(t, b.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2})
	if f.holder("r1") != "b" || b.hops.Load() != 0 {
		t.Fatalf("holder %q after %d hops; want b, 0", f.holder("r1"), b.hops.Load())
	}
}

func TestTheLoopGuardStopsAForwardLoop(t *testing.T) {
	f := newFleet(t)
	var addrA, addrB atomic.Value
	// Each node thinks the other owns every room.
	a := f.start(t, "a", ownersFunc(func(context.Context, string) (string, bool, error) { return addrB.Load().(string), true, nil }))
	b := f.start(t, "b", ownersFunc(func(context.Context, string) (string, bool, error) { return addrA.Load().(string), true, nil }))
	addrA.Store(a.addr)
	addrB.Store(b.addr)

	// Nobody holds r1: one hop, and b claims it.
	createOn(t, a)
	if f.holder("r1") != "b" || a.hops.Load() != 1 || b.hops.Load() != 0 {
		t.Fatalf("holder %q, hops a=%d b=%d; want b, 1, 0", f.holder("r1"), a.hops.Load(), b.hops.Load())
	}
	// b holds r1, a call through b hops to a, which cannot claim it: a
	// retryable refusal, sent back to b, which tries a again, a bounded
	// number of times, never bouncing between them.
	_, err := b.rooms.JoinRoom(context.Background(), connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2}))
	wantErr(t, err, connect.CodeUnavailable, lease.ErrHeld.Reason)
	if a.hops.Load() != 1 || b.hops.Load() != 5 {
		t.Fatalf("hops a=%d b=%d; want 1 and the 5 attempts of b", a.hops.Load(), b.hops.Load())
	}
	if a.reg.Loaded() != 0 {
		t.Fatalf("a loaded %d rooms", a.reg.Loaded())
	}
}

func TestAHopCarriesTheCallersCredential(t *testing.T) {
	f := newFleet(t)
	a, b := f.start(t, "a", nil), f.start(t, "b", nil)
	createOn(t, a)
	// Through b, with b's hop to a (which requires the token) carrying it.
	must(t, b.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2})
	if b.hops.Load() != 1 {
		t.Fatalf("b sent %d hops, want 1", b.hops.Load())
	}
	// A hop without it is refused.
	anon := roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+a.addr, connect.WithInterceptors(forwardedBy("b")))
	_, err := anon.JoinRoom(context.Background(), connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-3", OperatorUserId: 3}))
	wantErr(t, err, connect.CodeUnauthenticated, "unauthenticated")
	http.DefaultClient.CloseIdleConnections()
}

// forwardedBy makes a client's calls look like hops from node.
func forwardedBy(node string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set(rpc.ForwardedBy, node)
			return next(ctx, req)
		}
	}
}

func TestACallMeetingAMoveIsServedByTheNewOwnerOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stop makes a leave between b's look-up and b's hop.
		stop func(t *testing.T, a *node)
	}{
		// a answers shutting_down.
		{"registry closed", func(t *testing.T, a *node) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := a.reg.Close(ctx); err != nil {
				t.Error(err)
			}
		}},
		// a's address refuses the connection.
		{"node gone", func(_ *testing.T, a *node) { a.shutdown() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			var a *node
			var moved atomic.Bool
			// b's look-up of r1 finds a, and a leaves before b's hop arrives.
			bLease := nodeLease{f: f, node: "b"}
			b := f.start(t, "b", ownersFunc(func(ctx context.Context, roomID string) (string, bool, error) {
				addr, ok, err := bLease.Owner(ctx, roomID, nil)
				if ok && !moved.Swap(true) {
					tc.stop(t, a)
				}
				return addr, ok, err
			}))
			a, c := f.start(t, "a", nil), f.start(t, "c", nil)
			createOn(t, a)
			must(t, a.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2})

			mic := &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "mic-2", OperatorUserId: 2, SeatIndex: 1}
			first := must(t, b.rooms.TakeMic, mic)
			if !moved.Load() || f.holder("r1") != "b" || first.GetRoomVersion() != 3 {
				t.Fatalf("moved %v, holder %q, version %d; want true, b, 3", moved.Load(), f.holder("r1"), first.GetRoomVersion())
			}
			// The same command through any node is the same answer: it applied once.
			for _, n := range []*node{b, c} {
				if again := must(t, n.rooms.TakeMic, mic); again.GetRoomVersion() != first.GetRoomVersion() {
					t.Fatalf("retry through %s: version %d, want %d", n.id, again.GetRoomVersion(), first.GetRoomVersion())
				}
			}
			snap := must(t, c.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1"})
			if snap.GetRoomVersion() != 3 || snap.GetSnapshot().GetSeats()[1].GetUserId() != 2 {
				t.Fatalf("snapshot: version %d, seats %v", snap.GetRoomVersion(), snap.GetSnapshot().GetSeats())
			}
		})
	}
}

func TestUsersRacingForASeatThroughDifferentNodes(t *testing.T) {
	f := newFleet(t)
	nodes := []*node{f.start(t, "a", nil), f.start(t, "b", nil), f.start(t, "c", nil)}
	createOn(t, nodes[1])
	const users = 8
	for u := int64(2); u < 2+users; u++ {
		must(t, nodes[u%3].rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("join-", u), OperatorUserId: u})
	}
	errs := make(chan error, users)
	var wg sync.WaitGroup
	for u := int64(2); u < 2+users; u++ {
		wg.Go(func() {
			_, err := nodes[u%3].rooms.TakeMic(context.Background(), connect.NewRequest(&roomv1.TakeMicRequest{
				RoomId: "r1", CommandId: fmt.Sprint("mic-", u), OperatorUserId: u, SeatIndex: 0,
			}))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case rpc.Reason(err) != "seat_occupied":
			t.Errorf("a loser got %v (reason %q), want seat_occupied", err, rpc.Reason(err))
		}
	}
	if won != 1 {
		t.Fatalf("%d users won the seat, want 1", won)
	}
	for _, n := range nodes {
		snap := must(t, n.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1"})
		if seat := snap.GetSnapshot().GetSeats()[0].GetUserId(); seat < 2 || seat >= 2+users {
			t.Fatalf("seat 0 holds %d through %s", seat, n.id)
		}
	}
	if f.holder("r1") != "b" || nodes[0].reg.Loaded() != 0 || nodes[2].reg.Loaded() != 0 {
		t.Fatalf("holder %q, loaded a=%d c=%d; want the room on b only", f.holder("r1"), nodes[0].reg.Loaded(), nodes[2].reg.Loaded())
	}
}

func TestACommandWhoseAnswerIsLostInAMoveAppliesOnce(t *testing.T) {
	f := newFleet(t)
	var lost atomic.Bool
	// a commits the first hop of mic-2, then leaves, and its answer never
	// reaches b: b cannot know whether it applied.
	a := f.start(t, "a", nil, func(a *node, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != roomv1connect.RoomServiceTakeMicProcedure || lost.Swap(true) {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := a.reg.Close(ctx); err != nil {
				t.Error(err)
			}
			panic(http.ErrAbortHandler)
		})
	})
	b := f.start(t, "b", nil)
	createOn(t, a)
	must(t, a.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2})

	mic := &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "mic-2", OperatorUserId: 2, SeatIndex: 1}
	first := must(t, b.rooms.TakeMic, mic)
	if !lost.Load() || f.holder("r1") != "b" || first.GetRoomVersion() != 3 {
		t.Fatalf("lost %v, holder %q, version %d; want true, b, 3", lost.Load(), f.holder("r1"), first.GetRoomVersion())
	}
	if again := must(t, b.rooms.TakeMic, mic); again.GetRoomVersion() != 3 {
		t.Fatalf("retry: version %d, want 3", again.GetRoomVersion())
	}
	snap := must(t, b.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1"})
	if snap.GetRoomVersion() != 3 || snap.GetSnapshot().GetSeats()[1].GetUserId() != 2 {
		t.Fatalf("snapshot: version %d, seats %v", snap.GetRoomVersion(), snap.GetSnapshot().GetSeats())
	}
}

// TestAHopToAnOwnerThatDoesNotAnswerIsGivenUpAtItsBound: an owner whose
// connection is alive (it answers HTTP/2 pings) but that never answers the
// call is given up on after the hop's bound, though the caller set no
// deadline: a room command, which carries its command_id, goes again to the
// owner found then (here the node itself, which claims the room); a call
// that may not be sent twice answers unavailable and is not sent again.
func TestAHopToAnOwnerThatDoesNotAnswerIsGivenUpAtItsBound(t *testing.T) {
	f := newFleet(t)
	f.hopTimeout = 200 * time.Millisecond
	var stalled atomic.Int64
	stuck := h2cServer(t, stalling(&stalled))
	// b's first look-up of each room names the stuck owner, every later
	// one finds nobody holding it.
	var looked sync.Map
	b := f.start(t, "b", ownersFunc(func(_ context.Context, roomID string) (string, bool, error) {
		if _, again := looked.LoadOrStore(roomID, true); again {
			return "", false, nil
		}
		return stuck, true, nil
	}))

	must(t, b.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	if f.holder("r1") != "b" || stalled.Load() != 1 {
		t.Fatalf("holder %q, calls to the stuck owner %d; want b, 1", f.holder("r1"), stalled.Load())
	}

	looked.Delete("r1")
	_, err := b.rooms.PublishRobotDisplay(context.Background(), connect.NewRequest(&roomv1.PublishRobotDisplayRequest{RoomId: "r1", EventType: "RoomUserJoined", PayloadJson: "{}"}))
	wantErr(t, err, connect.CodeUnavailable, room.ErrUnavailable.Reason)
	if stalled.Load() != 2 {
		t.Fatalf("calls to the stuck owner %d; want 2: the robot display event was not sent again", stalled.Load())
	}
}

// TestAnOwnersAnswerAtTheHopBoundIsNotTakenAsItsAnswer: an owner that is
// alive but slower than the hop's bound answers at the deadline the hop
// gave it, just before the hop's own context ends; a call without a
// deadline of its own is then sent to the owner found next, not answered
// with the owner's unavailable.
func TestAnOwnersAnswerAtTheHopBoundIsNotTakenAsItsAnswer(t *testing.T) {
	f := newFleet(t)
	f.hopTimeout = 100 * time.Millisecond
	// The owner answers CreateRoom only when its call's context ends, as a
	// cell that stops waiting does: unavailable, the command may still
	// commit.
	var calls atomic.Int64
	h := connect.NewUnaryHandler(roomv1connect.RoomServiceCreateRoomProcedure,
		func(ctx context.Context, _ *connect.Request[roomv1.CreateRoomRequest]) (*connect.Response[roomv1.CreateRoomResponse], error) {
			calls.Add(1)
			<-ctx.Done()
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("%v; the command may still commit, retry with the same command_id", ctx.Err()))
		})
	slow := h2cServer(t, h)
	var looked sync.Map // the first look-up of a room names the slow owner; later ones, nobody
	b := f.start(t, "b", ownersFunc(func(_ context.Context, roomID string) (string, bool, error) {
		if _, again := looked.LoadOrStore(roomID, true); again {
			return "", false, nil
		}
		return slow, true, nil
	}))
	const n = 10
	for i := range n {
		id := fmt.Sprintf("h%d", i)
		must(t, b.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: id, CommandId: "create-" + id, OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
		if f.holder(id) != "b" {
			t.Fatalf("room %s held by %q after the slow owner's hop; want b", id, f.holder(id))
		}
	}
	if got := calls.Load(); got != n {
		t.Fatalf("%d hops to the slow owner, want %d", got, n)
	}
}

// TestAMemberThatAnswersNothingIsPassedOver: a room nobody holds, chosen
// for a member that accepts calls and answers none (frozen), goes to the
// next best once the hop's bound ran out, not to the same member on every
// attempt.
func TestAMemberThatAnswersNothingIsPassedOver(t *testing.T) {
	f := newFleet(t)
	f.hopTimeout = 100 * time.Millisecond
	var stalled atomic.Int64
	addr := h2cServer(t, stalling(&stalled))
	// The rendezvous choice for the room is the frozen member until it is
	// passed over; then it is this node.
	b := f.start(t, "b", passOver(func(unreachable []string) (string, bool) {
		if slices.Contains(unreachable, addr) {
			return "", false
		}
		return addr, true
	}))
	must(t, b.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	if f.holder("r1") != "b" || stalled.Load() != 1 {
		t.Fatalf("holder %q, calls to the frozen member %d; want b, 1", f.holder("r1"), stalled.Load())
	}
}

// passOver is an Owners that chooses by the addresses passed over so far.
type passOver func(unreachable []string) (string, bool)

func (p passOver) Owner(_ context.Context, _ string, unreachable []string) (string, bool, error) {
	addr, ok := p(unreachable)
	return addr, ok, nil
}

// h2cServer serves h over HTTP/2 without TLS on a loopback port until the
// test ends, and returns its address.
func h2cServer(t *testing.T, h http.Handler) string {
	t.Helper()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: p, Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	return ln.Addr().String()
}

// stalling is a handler that counts its calls and answers none: it returns
// when the call is cancelled, as a frozen node's calls end.
func stalling(calls *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-r.Context().Done()
	})
}
