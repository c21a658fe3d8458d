package bench

import (
	"context"
	"encoding/json"
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
	const budget = 20
	// Tencent allows 200 calls per second per API by default; a deployment this
	// busy raises that by contract, so the local endpoint here does too.
	local, client, stop, err := localTencent(1_000_000, 1_000_000)
	if err != nil {
		return nil, err
	}
	defer stop()

	var mu sync.Mutex
	lat := map[room.Priority][]time.Duration{}
	shed := map[string]int{}
	lane := im.New(im.Config{Budget: budget, AppBudget: 1_000_000}, im.TencentSender{Client: client}, im.Metrics{
		Latency: func(_ context.Context, p room.Priority, d time.Duration) {
			mu.Lock()
			lat[p] = append(lat[p], d)
			mu.Unlock()
		},
		Shed: func(p room.Priority, reason string) { mu.Lock(); shed[string(p)]++; mu.Unlock() },
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
	}}
	// The joins' own messages: display events wait for their worker (and
	// go along with High ones) rather than be lost, and this is their wait.
	if normal := lat[room.PriorityNormal]; len(normal) > 0 {
		slices.Sort(normal)
		rows = append(rows, Row{
			Name: "Normal IM messages (joins)", Ops: len(normal), Elapsed: elapsed,
			P50: normal[len(normal)/2], P99: normal[len(normal)*99/100],
			Extra: "committed to sent, the oldest join a message carries; no target",
		})
	}
	rows = append(rows, []Row{{
		Name: "messages per group per second (max)", Ops: maxPerSecond, Elapsed: time.Second,
		Extra: fmt.Sprintf("budget %d, Tencent drops above 40; dropped by IM: %d", budget, dropped),
	}, {
		Name: "events shed by the lane", Ops: shed["High"] + shed["Normal"] + shed["Low"], Elapsed: elapsed,
		Extra: fmt.Sprintf("High %d (target 0), Normal %d, Low %d", shed["High"], shed["Normal"], shed["Low"]),
	}}...)
	return rows, nil
}

// IMBudgetCase is one load of the app-budget scenario: Rooms rooms, each
// taking Rate mic changes per second, against an app budget of Budget
// send_group_msg calls per second.
type IMBudgetCase struct {
	Rooms  int
	Rate   float64
	Budget int
}

// imGroupBudget is the per-group budget of the app-budget scenario (the
// default im_group_budget).
const imGroupBudget = 20

// Bound is the service level of docs/im-messages.md: each room's newest
// state reaches its group within max(1/group budget, R/B) + 0.5 s.
func (c IMBudgetCase) Bound() time.Duration {
	turn := max(time.Second/imGroupBudget, time.Duration(float64(c.Rooms)/float64(c.Budget)*float64(time.Second)))
	return turn + 500*time.Millisecond
}

// IMBudget measures the direct IM lane on Tencent's app budget: every room
// of c has a user taking and leaving a mic seat c.Rate times a second for
// d, through the engine, against the local Tencent endpoint enforcing an
// app-wide limit of c.Budget calls/s per command. It reports the
// newest-state delay (from a command's reply to the first message in its
// group carrying that mic row or a newer one) beside the bound, the calls
// per second against the budget, and what the lane merged and superseded.
func IMBudget(ctx context.Context, env Env, c IMBudgetCase, d time.Duration) ([]Row, error) {
	local, client, stop, err := localTencent(c.Budget, c.Budget*9/10)
	if err != nil {
		return nil, err
	}
	defer stop()

	var mu sync.Mutex
	var merged, superseded, rateLimited, highShed int
	lane := im.New(im.Config{Budget: imGroupBudget, AppBudget: float64(c.Budget)}, im.TencentSender{Client: client}, im.Metrics{
		Merged:      func(n int) { mu.Lock(); merged += n; mu.Unlock() },
		Coalesced:   func() { mu.Lock(); superseded++; mu.Unlock() },
		RateLimited: func() { mu.Lock(); rateLimited++; mu.Unlock() },
		Shed: func(p room.Priority, _ string) {
			if p == room.PriorityHigh {
				mu.Lock()
				highShed++
				mu.Unlock()
			}
		},
	}, quiet)
	defer lane.Close()

	repo, err := env.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = repo.Close() }()
	reg := cell.New(env.engineConfig(), repo, lease.NewLocal(), lane, nil, quiet)
	defer func() { _ = reg.Close(ctx) }()
	ids, err := createRooms(ctx, reg, "imb", c.Rooms)
	if err != nil {
		return nil, err
	}
	if err := parallel(8, len(ids), func(i int) error { return client.CreateGroup(ctx, ids[i], ids[i]) }); err != nil {
		return nil, err
	}
	if err := parallel(32, len(ids), func(i int) error {
		_, err := reg.Submit(ctx, &room.Envelope{RoomID: ids[i], CommandID: "join", Operator: 7, Command: &room.JoinRoom{Nickname: "n"}})
		return err
	}); err != nil {
		return nil, err
	}
	before := local.CallStats("send_group_msg")

	// acks[i] holds room i's mic commands: the version each committed at
	// and when its reply came.
	type ack struct {
		version int64
		at      time.Time
	}
	acks := make([][]ack, c.Rooms)
	var wg sync.WaitGroup
	var failed atomic.Int64
	every := time.Duration(float64(time.Second) / c.Rate)
	start := time.Now()
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			phase := time.NewTimer(time.Duration(i) * every / time.Duration(c.Rooms)) // rooms spread over the period
			defer phase.Stop()
			select {
			case <-ctx.Done():
				return
			case <-phase.C:
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for n := 0; time.Since(start) < d && ctx.Err() == nil; n++ {
				var cmd room.Command = &room.TakeMic{SeatIndex: 1}
				if n%2 == 1 {
					cmd = &room.LeaveMic{}
				}
				res, err := reg.Submit(ctx, &room.Envelope{RoomID: id, CommandID: fmt.Sprint("m", n), Operator: 7, Command: cmd})
				if err != nil {
					failed.Add(1)
				} else {
					acks[i] = append(acks[i], ack{res.RoomVersion, time.Now()})
				}
				<-t.C
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	// Wait (bounded) until every room's last mic row is in its group.
	arrivals := func(id string) []timlocal.Message { return local.Messages(id) }
	newest := func(msgs []timlocal.Message, version int64) time.Time {
		for _, m := range msgs {
			if !m.Dropped && carriesMicRow(m.Data, version) {
				return m.Time
			}
		}
		return time.Time{}
	}
	deadline := time.Now().Add(c.Bound() + 10*time.Second)
	for i, id := range ids {
		for len(acks[i]) > 0 && newest(arrivals(id), acks[i][len(acks[i])-1].version).IsZero() && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	sending := time.Since(start) // the calls went on until the last room's state arrived
	var delays, finals []time.Duration
	missing := 0
	for i, id := range ids {
		msgs := arrivals(id)
		for j, a := range acks[i] {
			at := newest(msgs, a.version)
			if at.IsZero() {
				missing++
				continue
			}
			delays = append(delays, max(at.Sub(a.at), 0))
			if j == len(acks[i])-1 {
				finals = append(finals, max(at.Sub(a.at), 0))
			}
		}
	}
	if len(delays) == 0 {
		return nil, fmt.Errorf("no mic row reached a group")
	}
	p50, p99 := percentiles(delays)
	_, finalP99 := percentiles(finals)
	bound := c.Bound()
	st := local.CallStats("send_group_msg")
	over40 := 0
	for _, id := range ids {
		if local.Stats(id).MaxOfferedPerSecond > timlocal.DefaultGroupRate {
			over40++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	label := fmt.Sprintf("%d rooms x %g/s, budget %d/s", c.Rooms, c.Rate, c.Budget)
	return []Row{{
		Name: "newest mic row delay, " + label, Ops: len(delays), Elapsed: elapsed, P50: p50, P99: p99,
		Extra: fmt.Sprintf("bound %.2fs: p99 %.2fx; last command of each room p99 %.2fs, %d never arrived, %d commands failed",
			bound.Seconds(), float64(p99)/float64(bound), finalP99.Seconds(), missing, failed.Load()),
	}, {
		Name: "send_group_msg calls, " + label, Ops: int(st.Accepted - before.Accepted), Elapsed: sending,
		Extra: fmt.Sprintf("budget %d/s: at most %d in one second, %d refused, %d frequency errors", c.Budget, st.MaxPerSecond, st.Refused, rateLimited),
	}, {
		Name: "events merged, " + label, Ops: merged, Elapsed: elapsed,
		Extra: fmt.Sprintf("%d mic rows superseded; High lost %d (target 0); groups over 40/s %d (target 0)", superseded, highShed, over40),
	}}, nil
}

// carriesMicRow reports whether a message's data carries a mic row event
// of version or newer, alone or in a Batch.
func carriesMicRow(data string, version int64) bool {
	var env struct {
		Type        string            `json:"type"`
		RoomVersion int64             `json:"room_version"`
		Events      []json.RawMessage `json:"events"`
	}
	if json.Unmarshal([]byte(data), &env) != nil {
		return false
	}
	if env.Type == string(room.EventRoomMicChanged) {
		return env.RoomVersion >= version
	}
	for _, e := range env.Events {
		if carriesMicRow(string(e), version) {
			return true
		}
	}
	return false
}

// localTencent serves a local Tencent-compatible endpoint that allows
// apiRate calls per second of each command, and returns it with a client
// pacing send_group_msg to callRate, and a stop for both.
func localTencent(apiRate, callRate int) (*timlocal.Server, *tencent.Client, func(), error) {
	const sdk, key, admin = 1400000002, "bench-key", "administrator"
	local := timlocal.New(timlocal.Config{SDKAppID: sdk, SecretKey: key, Admin: admin, APIRate: apiRate})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	srv := &http.Server{Handler: local}
	go func() { _ = srv.Serve(ln) }()
	client, err := tencent.New(tencent.Config{SDKAppID: sdk, SecretKey: key, Admin: admin, Endpoint: "http://" + ln.Addr().String(),
		CallsPerSecond: callRate, Paced: []string{"send_group_msg"}}, quiet)
	if err != nil {
		_ = srv.Close()
		return nil, nil, nil, err
	}
	return local, client, func() { client.Close(); _ = srv.Close() }, nil
}
