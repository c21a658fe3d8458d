package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/im"
	"hyapp/room-service/im/tencent"
	"hyapp/room-service/im/timlocal"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
)

// IMScenario measures the direct IM lane against the local Tencent endpoint
// while one hot room takes hotRate commands/s and rooms other rooms take
// rate commands/s each, for d: committed-to-sent latency of High events,
// the most messages one group got in a second (against the budget and
// Tencent's 40), and what the lane shed by class.
func IMScenario(ctx context.Context, env Env, hotRate, rooms, rate int, d time.Duration) ([]Row, error) {
	const sdk, key, admin, budget = 1400000002, "bench-key", "administrator", 20
	// Tencent allows 200 calls per second per API by default; a deployment this
	// busy raises that by contract, so the local endpoint here does too.
	local := timlocal.New(timlocal.Config{SDKAppID: sdk, SecretKey: key, Admin: admin, APIRate: 1_000_000})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: local}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	client, err := tencent.New(tencent.Config{SDKAppID: sdk, SecretKey: key, Admin: admin, Endpoint: "http://" + ln.Addr().String(), CallsPerSecond: 1_000_000}, quiet)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	var mu sync.Mutex
	lat := map[room.Priority][]time.Duration{}
	shed := map[string]int{}
	lane := im.New(im.Config{Budget: budget}, im.TencentSender{Client: client}, im.Metrics{
		Latency: func(p room.Priority, d time.Duration) { mu.Lock(); lat[p] = append(lat[p], d); mu.Unlock() },
		Shed:    func(p room.Priority, reason string) { mu.Lock(); shed[string(p)]++; mu.Unlock() },
	}, quiet)
	defer lane.Close()

	repo, err := env.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = repo.Close() }()
	cfg := env.engineConfig()
	reg := cell.New(cfg, repo, lease.NewLocal(), lane, nil, quiet)
	defer func() { _ = reg.Close(ctx) }()

	ids, err := createRooms(ctx, reg, "im", rooms+1)
	if err != nil {
		return nil, err
	}
	if err := parallel(32, len(ids), func(i int) error { return client.CreateGroup(ctx, ids[i], ids[i]) }); err != nil {
		return nil, err
	}
	var seq atomic.Int64
	// Every tenth command is a chat mute (High); the others are joins (Normal).
	command := func(roomID string) error {
		k := seq.Add(1)
		e := &room.Envelope{RoomID: roomID, CommandID: fmt.Sprint("c", k), Operator: 1000 + k, Command: &room.JoinRoom{Nickname: "listener"}}
		if k%10 == 0 {
			e.Operator, e.Command = 1, &room.MuteUser{TargetUserID: 1_000_000 + k, DurationSeconds: 1}
		}
		_, err := reg.Submit(ctx, e)
		return err
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	drive := func(roomID string, perSecond int) {
		defer wg.Done()
		every := time.Second / time.Duration(perSecond)
		t := time.NewTicker(max(every, time.Millisecond))
		defer t.Stop()
		per := max(1, int(time.Millisecond/every))
		for end := time.Now().Add(d); time.Now().Before(end); <-t.C {
			for range per {
				if err := command(roomID); err != nil {
					failed.Add(1)
				}
			}
		}
	}
	start := time.Now()
	for range 8 { // the hot room's callers
		wg.Add(1)
		go drive(ids[0], hotRate/8)
	}
	for _, id := range ids[1:] {
		wg.Add(1)
		go drive(id, rate)
	}
	wg.Wait()
	elapsed := time.Since(start)
	// Give the lane a moment to send what it still holds before counting.
	time.Sleep(3 * time.Second)
	maxPerSecond, dropped := 0, uint64(0)
	for _, id := range ids {
		st := local.Stats(id)
		maxPerSecond = max(maxPerSecond, st.MaxOfferedPerSecond)
		dropped += st.Dropped
	}
	mu.Lock()
	defer mu.Unlock()
	high := lat[room.PriorityHigh]
	slices.Sort(high)
	if len(high) == 0 {
		return nil, fmt.Errorf("no High message was sent")
	}
	rows := []Row{{
		Name: fmt.Sprintf("High IM, hot room %d/s + %d rooms x %d/s", hotRate, rooms, rate), Ops: len(high), Elapsed: elapsed,
		P50: high[len(high)/2], P99: high[len(high)*99/100],
		Extra: fmt.Sprintf("p99 target <= 100 ms: %.2fx; %d commands failed", ms(high[len(high)*99/100])/100, failed.Load()),
	}, {
		Name: "messages per group per second (max)", Ops: maxPerSecond, Elapsed: time.Second,
		Extra: fmt.Sprintf("budget %d, Tencent drops above 40; dropped by IM: %d", budget, dropped),
	}, {
		Name: "events shed by the lane", Ops: shed["High"] + shed["Normal"] + shed["Low"], Elapsed: elapsed,
		Extra: fmt.Sprintf("High %d (target 0), Normal %d, Low %d", shed["High"], shed["Normal"], shed["Low"]),
	}}
	return rows, nil
}
