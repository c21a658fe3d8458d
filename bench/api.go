package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
)

// APIOptions shape the API scenarios.
type APIOptions struct {
	// Token is the service token, when the service needs one.
	Token string
	// Conns is the number of HTTP/2 connections the calls spread over.
	Conns int
	// Rooms is the number of rooms the many-room scenarios use.
	Rooms int
	// Commands is the number of calls of each command scenario.
	Commands int
	// Run names the rooms of this run, so runs against one service do not meet.
	Run string
	// Metrics is the service's Prometheus endpoint (empty: base + /metrics);
	// when it answers, each row says the service's CPU time and allocations
	// per call.
	Metrics string
}

// processCost reads the service's CPU seconds and heap allocations so far
// from its /metrics; ok is false when they cannot be read.
func processCost(ctx context.Context, url string) (cpu, allocs float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, 0, false
	}
	found := 0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		v, err := strconv.ParseFloat(value, 64)
		switch {
		case err != nil:
		case name == "process_cpu_seconds_total":
			cpu, found = v, found+1
		case name == "go_memstats_mallocs_total":
			allocs, found = v, found+1
		}
	}
	return cpu, allocs, found == 2
}

// settle waits, up to a minute, until the service at metrics spends under
// a tenth of a core.
func settle(ctx context.Context, metrics string) {
	const every = 500 * time.Millisecond
	prev, _, ok := processCost(ctx, metrics)
	for end := time.Now().Add(time.Minute); ok && time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		cpu, _, ok2 := processCost(ctx, metrics)
		if !ok2 || cpu-prev < 0.1*every.Seconds() {
			return
		}
		prev = cpu
	}
}

// APIScenarios measures a running service at base (http://host:port) through its API, the way
// clients reach it: gRPC over HTTP/2 (connect-go) on opts.Conns
// connections, every call with a deadline. First the health check with 256
// in flight, a call that does no work: the transport's ceiling, which
// every other row is read against. Then CreateRoom with 16 in flight;
// joins across opts.Rooms rooms with 256 in flight, and with two per room
// in flight, the engine scenario's load; joins in one hot room with 256 and with 64 in flight; GetRoomSnapshot
// across the rooms with 128 in flight. The last row is this load
// generator's own CPU use, a share of the machine's cores.
func APIScenarios(ctx context.Context, base string, opts APIOptions) ([]Row, error) {
	if opts.Conns <= 0 {
		opts.Conns = 8
	}
	clients := make([]roomv1connect.RoomServiceClient, opts.Conns)
	healths := make([]*connect.Client[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse], opts.Conns)
	for i := range clients {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: p}
		defer tr.CloseIdleConnections()
		var copts []connect.ClientOption
		copts = append(copts, connect.WithGRPC())
		if opts.Token != "" {
			copts = append(copts, connect.WithInterceptors(bearer(opts.Token)))
		}
		clients[i] = roomv1connect.NewRoomServiceClient(&http.Client{Transport: tr}, base, copts...)
		healths[i] = connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](&http.Client{Transport: tr},
			strings.TrimSuffix(base, "/")+healthv1.Health_Check_FullMethodName, copts...)
	}
	client := func(w int) roomv1connect.RoomServiceClient { return clients[w%len(clients)] }
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Second) }
	if opts.Metrics == "" {
		opts.Metrics = strings.TrimSuffix(base, "/") + "/metrics"
	}
	// measured runs one scenario and adds the service's cost per call,
	// once the service finished what the previous scenario left it (IM
	// messages waiting for the app budget, relay chains), so that work is
	// not counted against this one.
	measured := func(run func() (Row, error)) (Row, error) {
		settle(ctx, opts.Metrics)
		cpu0, allocs0, ok0 := processCost(ctx, opts.Metrics)
		r, err := run()
		if err != nil {
			return r, err
		}
		if cpu1, allocs1, ok1 := processCost(ctx, opts.Metrics); ok0 && ok1 && r.Ops > 0 {
			cost := fmt.Sprintf("service: %.0f µs CPU, %.0f allocs per call", 1e6*(cpu1-cpu0)/float64(r.Ops), (allocs1-allocs0)/float64(r.Ops))
			r.Extra = strings.TrimPrefix(r.Extra+"; "+cost, "; ")
		}
		return r, nil
	}
	var cpu0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu0)
	start := time.Now()

	// The transport's ceiling: the health check does no work, so its rate
	// is what HTTP/2 and the gRPC framing alone allow this process and
	// this load generator on this machine; the command rows are read
	// against it.
	floor, err := measured(func() (Row, error) {
		return closedLoop("Health/Check, 256 in flight (a call that does no work: the transport's ceiling)", 256, opts.Commands, func(w int, _ int64) error {
			c, cancel := call()
			defer cancel()
			res, err := healths[w%len(healths)].CallUnary(c, connect.NewRequest(&healthv1.HealthCheckRequest{}))
			if err == nil && res.Msg.GetStatus() != healthv1.HealthCheckResponse_SERVING {
				err = fmt.Errorf("health: %s", res.Msg.GetStatus())
			}
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("health check: %w", err)
	}
	ofFloor := func(r *Row) {
		r.Extra = strings.TrimPrefix(fmt.Sprintf("%.0f%% of the transport's ceiling; %s", 100*r.Rate()/floor.Rate(), r.Extra), "; ")
	}

	rooms := make([]string, opts.Rooms)
	for i := range rooms {
		rooms[i] = fmt.Sprintf("%s-api-%d", opts.Run, i)
	}
	create, err := measured(func() (Row, error) {
		return closedLoop("CreateRoom, 16 in flight", 16, len(rooms)+1, func(w int, i int64) error {
			id := fmt.Sprintf("%s-hot", opts.Run)
			if int(i) < len(rooms) {
				id = rooms[i]
			}
			c, cancel := call()
			defer cancel()
			_, err := client(w).CreateRoom(c, connect.NewRequest(&roomv1.CreateRoomRequest{
				RoomId: id, CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10, Title: "bench",
			}))
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("create rooms: %w", err)
	}
	create.Extra = strings.TrimSuffix(fmt.Sprintf("target >= 2000/s: %.2fx; %s", create.Rate()/2000, create.Extra), "; ")
	ofFloor(&create)

	scenario := 0
	join := func(name string, ids []string, callers, users int) (Row, error) {
		// Command ids of their own: a scenario that reused another's on
		// the same room would measure duplicate answers, not joins.
		scenario++
		prefix := fmt.Sprintf("j%d-", scenario)
		return measured(func() (Row, error) {
			return closedLoop(name, callers, opts.Commands, func(w int, i int64) error {
				c, cancel := call()
				defer cancel()
				_, err := client(w).JoinRoom(c, connect.NewRequest(&roomv1.JoinRoomRequest{
					RoomId: ids[int(i)%len(ids)], CommandId: prefix + strconv.FormatInt(i, 10), OperatorUserId: 1000 + i%int64(users),
				}))
				return err
			})
		})
	}
	many, err := join(fmt.Sprintf("JoinRoom, %d rooms, 256 in flight", len(rooms)), rooms, 256, 100_000)
	if err != nil {
		return nil, err
	}
	ofFloor(&many)
	// The engine scenario drives its rooms with two callers each in
	// flight; through the API at that load the two compare like for like
	// (at 256 in flight the rate is bounded by in-flight / latency).
	engineLoad := 2 * len(rooms)
	manyAtEngineLoad, err := join(fmt.Sprintf("JoinRoom, %d rooms, %d in flight (the engine's load)", len(rooms), engineLoad), rooms, engineLoad, 100_000)
	if err != nil {
		return nil, err
	}
	ofFloor(&manyAtEngineLoad)
	// The hot room at two loads: 256 callers in flight (the engine scenario's),
	// where a p99 of 50 ms would take about 10,000/s (Little's law: the mean
	// latency is in-flight / rate, 51 ms at 5,000/s), and 64 in flight,
	// where 5,000/s leaves room for the latency target.
	hotRoom := []string{fmt.Sprintf("%s-hot", opts.Run)}
	var hots []Row
	for _, callers := range []int{256, 64} {
		hot, err := join(fmt.Sprintf("JoinRoom, one hot room, %d in flight", callers), hotRoom, callers, 2000)
		if err != nil {
			return nil, err
		}
		hot.Extra = strings.TrimSuffix(fmt.Sprintf("target >= 5000/s: %.2fx; p99 target <= 50 ms: %.2fx; %s", hot.Rate()/5000, ms(hot.P99)/50, hot.Extra), "; ")
		ofFloor(&hot)
		hots = append(hots, hot)
	}
	read, err := measured(func() (Row, error) {
		return closedLoop(fmt.Sprintf("GetRoomSnapshot, %d rooms, 128 in flight", len(rooms)), 128, opts.Commands, func(w int, i int64) error {
			c, cancel := call()
			defer cancel()
			_, err := client(w).GetRoomSnapshot(c, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: rooms[int(i)%len(rooms)]}))
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	read.Extra = strings.TrimSuffix(fmt.Sprintf("target >= 20000/s: %.2fx; %s", read.Rate()/20000, read.Extra), "; ")
	ofFloor(&read)

	var cpu1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu1)
	wall := time.Since(start)
	used := time.Duration(cpu1.Utime.Nano() + cpu1.Stime.Nano() - cpu0.Utime.Nano() - cpu0.Stime.Nano())
	gen := Row{Name: "load generator CPU (this process)", Elapsed: wall,
		Extra: fmt.Sprintf("%.0f%% of %d cores over the run", 100*used.Seconds()/(wall.Seconds()*float64(runtime.NumCPU())), runtime.NumCPU())}
	return append(append([]Row{floor, create, many, manyAtEngineLoad}, hots...), read, gen), nil
}

// bearer sends the service token with every call.
func bearer(token string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	}
}
