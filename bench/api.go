package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
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
	// Ghz is the path of a ghz binary: when set, ghz drives the calls
	// instead of this process's client.
	Ghz string
	// Metrics is the service's Prometheus endpoint (empty: base + /metrics);
	// when it answers, each row says the service's CPU time and allocations
	// per call.
	Metrics string
	// GRPC is the address (host:port) of the service's gRPC transport
	// (grpc_listen): when set, the calls go there instead of base.
	GRPC string
	// Engine is the in-process engine's rate over as many rooms, measured
	// in the same run (0: not measured); the many-room joins are read
	// against it.
	Engine float64
	// HotMembers is the number of distinct users who join the hot room
	// (0: DefaultHotMembers); the hot rows name any other number.
	HotMembers int
	// Scenarios names the scenarios to run, of create, joins, hot and
	// reads (empty: all). The transport's ceiling and CreateRoom at 16 in
	// flight, which creates the rooms the others use, always run.
	Scenarios []string
	// Profile is the base URL of the service's admin listener (its
	// admin_listen, which serves /debug/pprof/): when set, the service is
	// profiled for ProfileFor during the many-room joins at 256 in
	// flight, its heap allocations are read before and after them, and
	// rows after them say its CPU and allocations by component
	// (Components).
	Profile string
	// ProfileFor is how long that profile runs (0: DefaultProfileFor). A
	// row shorter than it lends the rest of the profile to the next row,
	// the same joins at the engine's load.
	ProfileFor time.Duration
}

// DefaultProfileFor is how long the joins' profile runs unless told
// otherwise: shorter than the row at 50,000 calls on this machine.
const DefaultProfileFor = 2 * time.Second

// hotRate is the hot room's target: joins a second, each answered within
// 50 ms at the 99th percentile.
const hotRate = 5000

// DefaultHotMembers is the number of distinct users who join the hot room
// unless told otherwise.
const DefaultHotMembers = 2000

// APIScenarioNames are the scenarios APIOptions.Scenarios may name.
var APIScenarioNames = []string{"create", "joins", "hot", "reads"}

// runs reports whether the options ask for the scenario name.
func (o APIOptions) runs(name string) bool {
	return len(o.Scenarios) == 0 || slices.Contains(o.Scenarios, name)
}

// serviceCost is what the service's /metrics count so far: its CPU
// seconds, heap allocations and their bytes, the commands its rooms
// committed and the transactions they took, and its calls by procedure
// and latency (the cumulative buckets of room_rpc_duration_seconds).
type serviceCost struct {
	cpu, allocs, bytes, commands, commits float64
	served                                map[string][]bucket
}

// bucket is one bucket of a Prometheus histogram: n observations up to le.
type bucket struct{ le, n float64 }

// servedBuckets is the histogram of the service's own timing of each call,
// from its handlers' first interceptor to their answer: what a call waited
// for its room and its commit, without the transport's queues around it.
const servedBuckets = "room_rpc_duration_seconds_bucket"

// processCost reads the service's counters from its /metrics; ok is false
// when its CPU or allocations cannot be read (the commit counters are
// zero on a service without them).
func processCost(ctx context.Context, url string) (c serviceCost, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return c, false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return c, false
	}
	counters := map[string]*float64{
		"process_cpu_seconds_total": &c.cpu, "go_memstats_mallocs_total": &c.allocs,
		"go_memstats_alloc_bytes_total": &c.bytes, "room_commit_batch_commands_sum": &c.commands,
		"room_commit_seconds_count": &c.commits,
	}
	found := 0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if procedure, b, ok := servedBucket(sc.Text()); ok {
			if c.served == nil {
				c.served = make(map[string][]bucket)
			}
			c.served[procedure] = append(c.served[procedure], b)
			continue
		}
		name, value, _ := strings.Cut(sc.Text(), " ")
		if dst, known := counters[name]; known {
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				*dst = v
				if name == "process_cpu_seconds_total" || name == "go_memstats_mallocs_total" {
					found++
				}
			}
		}
	}
	return c, found == 2
}

// servedBucket parses a line of servedBuckets: the procedure and the
// bucket.
func servedBucket(line string) (procedure string, b bucket, ok bool) {
	labels, ok := strings.CutPrefix(line, servedBuckets+"{")
	if !ok {
		return "", b, false
	}
	labels, value, ok := strings.Cut(labels, "} ")
	if !ok {
		return "", b, false
	}
	le := ""
	for kv := range strings.SplitSeq(labels, ",") {
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "procedure":
			procedure = v
		case "le":
			le = v
		}
	}
	var err1, err2 error
	b.le, err1 = strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
	b.n, err2 = strconv.ParseFloat(value, 64)
	return procedure, b, procedure != "" && err1 == nil && err2 == nil
}

// per describes what the service spent between a and b on each of n
// calls, and the commands its commits carried each when it committed.
func per(a, b serviceCost, n int) string {
	calls := float64(n)
	s := fmt.Sprintf("service: %.0f µs CPU, %.0f allocs (%.1f KB) per call", 1e6*(b.cpu-a.cpu)/calls,
		(b.allocs-a.allocs)/calls, (b.bytes-a.bytes)/1024/calls)
	if commits := b.commits - a.commits; commits > 0 {
		s += fmt.Sprintf(", %.1f commands per commit", (b.commands-a.commands)/commits)
	}
	return s
}

// servedP99 is the bound of the first bucket of the service's own timing
// of procedure that holds 99% of the calls it served between a and b
// (the 99th percentile is at most that), and the bucket's lower bound.
func servedP99(a, b serviceCost, procedure string) (lo, hi float64, ok bool) {
	before := make(map[float64]float64, len(a.served[procedure]))
	for _, x := range a.served[procedure] {
		before[x.le] = x.n
	}
	after := slices.SortedFunc(slices.Values(b.served[procedure]), func(x, y bucket) int { return cmp.Compare(x.le, y.le) })
	if len(after) == 0 {
		return 0, 0, false
	}
	total := after[len(after)-1].n - before[after[len(after)-1].le]
	if total <= 0 {
		return 0, 0, false
	}
	for _, x := range after {
		if x.n-before[x.le] >= 0.99*total {
			return lo, x.le, !math.IsInf(x.le, 1)
		}
		lo = x.le
	}
	return 0, 0, false
}

// settle waits, up to a minute, until the service at metrics spends under
// a tenth of a core.
func settle(ctx context.Context, metrics string) {
	const every = 500 * time.Millisecond
	prev, ok := processCost(ctx, metrics)
	for end := time.Now().Add(time.Minute); ok && time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		now, ok2 := processCost(ctx, metrics)
		if !ok2 || now.cpu-prev.cpu < 0.1*every.Seconds() {
			return
		}
		prev = now
	}
}

// apiCall is one API scenario's request, in the two forms its load
// generators send: send makes call i of caller w through this process's
// client; template is the same request as protojson for ghz, with
// {{.RequestNumber}} in place of i (ghz's template data, with the sprig
// functions).
type apiCall struct {
	method   string // the gRPC method, package.Service/Method
	template string
	send     func(ctx context.Context, w int, i int64) error
	profile  string // with APIOptions.Profile: profile the row, its rows named so
}

// load is how a scenario's calls are driven: callers in flight, each
// sending its next call when the last one answered, or, when rate is above
// zero, offered at rate per second whatever the answers (ghz keeps callers
// in flight to pace).
type load struct {
	callers int
	rate    float64
}

// apiDriver drives total calls of c and returns the scenario's row: with
// callers in flight (a closed loop) or, when the load's rate is above zero,
// offered at that rate (an open loop); extra says what it took itself, for
// the table.
type apiDriver interface {
	drive(ctx context.Context, name string, l load, total int, c apiCall) (Row, error)
	extra(wall time.Duration) Row
	cpu() time.Duration // the load generator's CPU so far
}

// APIScenarios measures a running service at base (http://host:port) through its API, the way
// clients reach it: gRPC over HTTP/2 on opts.Conns connections, every call
// with a deadline, driven by this process's grpc-go client or, with
// opts.Ghz, by ghz. First the health check with 256
// in flight, a call that does no work: the transport's ceiling, which
// every other row is read against. Then CreateRoom with 16 and with 256 in flight;
// joins across opts.Rooms rooms with 256 in flight, and with two per room
// in flight, the engine scenario's load; joins in one hot room with 256 and with 64 in flight,
// and offered at 5,000 a second (an open loop); GetRoomSnapshot
// across the rooms with 128 in flight. The last row is the load
// generator's own CPU use, a share of the machine's cores.
func APIScenarios(ctx context.Context, base string, opts APIOptions) ([]Row, error) {
	if opts.Conns <= 0 {
		opts.Conns = 8
	}
	if opts.Metrics == "" {
		opts.Metrics = strings.TrimSuffix(base, "/") + "/metrics"
	}
	if opts.GRPC != "" {
		base = "http://" + opts.GRPC
	}
	// This process's client is grpc-go's: of the Go gRPC clients the one
	// that leaves the service the most of the machine they share.
	target := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSuffix(base, "/"), "http://"), "https://")
	conns := make([]*grpc.ClientConn, opts.Conns)
	for i := range conns {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		conns[i] = conn
	}
	if opts.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+opts.Token)
	}
	// invoke makes caller w's call of method with req, answered in res.
	invoke := func(ctx context.Context, w int, method string, req, res proto.Message) error {
		return conns[w%len(conns)].Invoke(ctx, "/"+method, req, res)
	}
	var driver apiDriver = newOwnDriver()
	if opts.Ghz != "" {
		driver = &ghzDriver{bin: opts.Ghz, base: base, token: opts.Token, conns: opts.Conns}
	}
	// profiled are the component rows of the profiled scenario.
	var profiled []Row
	// measured runs one scenario and adds the service's cost per call,
	// once the service finished what the previous scenario left it (IM
	// messages waiting for the app budget, relay chains), so that work is
	// not counted against this one.
	measured := func(name string, l load, total int, c apiCall) (Row, error) {
		settle(ctx, opts.Metrics)
		// The heap profiles force a collection each: outside the row's
		// own cost.
		profiling := c.profile != "" && opts.Profile != ""
		var heap0 *profile.Profile
		if profiling {
			var err error
			if heap0, err = heapAllocs(ctx, opts.Profile); err != nil {
				return Row{}, fmt.Errorf("%s: %w", name, err)
			}
		}
		cost0, ok0 := processCost(ctx, opts.Metrics)
		gen0 := driver.cpu()
		var prof *cpuProfile
		if profiling {
			prof = startProfile(ctx, opts.Profile, cmp.Or(opts.ProfileFor, DefaultProfileFor))
		}
		r, err := driver.drive(ctx, name, l, total, c)
		gen := driver.cpu() - gen0
		cost1, ok1 := processCost(ctx, opts.Metrics)
		var shares []Share
		if profiling {
			cpu, perr := prof.wait()
			var heap1, allocs *profile.Profile
			if perr == nil {
				heap1, perr = heapAllocs(ctx, opts.Profile)
			}
			if perr == nil {
				allocs, perr = allocsBetween(heap0, heap1)
			}
			if perr == nil {
				shares, perr = Components(cpu, allocs)
			}
			err = errors.Join(err, perr)
		}
		if err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
		var each perCall
		if ok0 && ok1 && r.Ops > 0 {
			n := float64(r.Ops)
			each = perCall{cpu: time.Duration(float64(time.Second) * (cost1.cpu - cost0.cpu) / n),
				allocs: (cost1.allocs - cost0.allocs) / n, bytes: (cost1.bytes - cost0.bytes) / n}
		}
		profiled = append(profiled, componentRows(c.profile, shares, each)...)
		if ok0 && ok1 && r.Ops > 0 {
			cost := fmt.Sprintf("%s; load generator: %.0f µs CPU per call", per(cost0, cost1, r.Ops), float64(gen.Microseconds())/float64(r.Ops))
			if lo, hi, ok := servedP99(cost0, cost1, "/"+c.method); ok {
				// The rest of a call's time is the transport's queues
				// and the load generator's, on the cores they share.
				cost += fmt.Sprintf("; the service's own p99 %g-%g ms", 1e3*lo, 1e3*hi)
			}
			r.Extra = strings.TrimPrefix(r.Extra+"; "+cost, "; ")
		}
		return r, nil
	}
	start := time.Now()

	// The transport's ceiling: the health check does no work, so its rate
	// is what HTTP/2 and the gRPC framing alone allow this service and
	// this load generator on this machine; the command rows are read
	// against it.
	floor, err := measured("Health/Check, 256 in flight (a call that does no work: the transport's ceiling)", load{callers: 256}, opts.Commands, apiCall{
		method: "grpc.health.v1.Health/Check", template: `{}`,
		send: func(ctx context.Context, w int, _ int64) error {
			var res healthv1.HealthCheckResponse
			err := invoke(ctx, w, "grpc.health.v1.Health/Check", &healthv1.HealthCheckRequest{}, &res)
			if err == nil && res.GetStatus() != healthv1.HealthCheckResponse_SERVING {
				err = fmt.Errorf("health: %s", res.GetStatus())
			}
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	ofFloor := func(r *Row) {
		r.Extra = strings.TrimPrefix(fmt.Sprintf("%.0f%% of the transport's ceiling; %s", 100*r.Rate()/floor.Rate(), r.Extra), "; ")
	}

	// Rooms <run>-api-0 … <run>-api-<Rooms-1>, and the hot room
	// <run>-api-<Rooms>.
	roomsOf := func(i string) string { return fmt.Sprintf("%s-api-%s", opts.Run, i) }
	hot := roomsOf(strconv.Itoa(opts.Rooms))
	// CreateRoom at two loads: 16 in flight, rooms 0 … Rooms (those the
	// rows below use), and 256 in flight, as many callers as the joins
	// have, rooms Rooms+1 … 5×Rooms, where the group commit writes many
	// rooms per transaction.
	creates := make([]Row, 0, 2)
	loads := []struct{ callers, first, n int }{{16, 0, opts.Rooms + 1}, {256, opts.Rooms + 1, 4 * opts.Rooms}}
	created := 5*opts.Rooms + 1
	if !opts.runs("create") {
		loads, created = loads[:1], opts.Rooms+1
	}
	for _, at := range loads {
		create, err := measured(fmt.Sprintf("CreateRoom, %d in flight", at.callers), load{callers: at.callers}, at.n, apiCall{
			method:   "room.v1.RoomService/CreateRoom",
			template: fmt.Sprintf(`{"room_id":"%s","command_id":"create","operator_user_id":1,"owner_user_id":1,"seat_count":10,"title":"bench"}`, roomsOf(fmt.Sprintf("{{add %d .RequestNumber}}", at.first))),
			send: func(ctx context.Context, w int, i int64) error {
				return invoke(ctx, w, "room.v1.RoomService/CreateRoom", &roomv1.CreateRoomRequest{
					RoomId: roomsOf(strconv.FormatInt(int64(at.first)+i, 10)), CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10, Title: "bench",
				}, &roomv1.CreateRoomResponse{})
			},
		})
		if err != nil {
			return nil, fmt.Errorf("create rooms: %w", err)
		}
		create.Extra = strings.TrimSuffix(fmt.Sprintf("target >= 2000/s: %.2fx; %s", create.Rate()/2000, create.Extra), "; ")
		ofFloor(&create)
		creates = append(creates, create)
	}
	rows := append([]Row{floor}, creates...)

	scenario := 0
	// join joins users 1000… in rooms (one room: the hot room; else
	// round robin over the rooms), at load l.
	join := func(name string, rooms int, l load, users int, profile string) (Row, error) {
		// Command ids of their own: a scenario that reused another's on
		// the same room would measure duplicate answers, not joins.
		scenario++
		prefix := fmt.Sprintf("j%d-", scenario)
		roomOf := func(i int64) string { return roomsOf(strconv.FormatInt(i%int64(rooms), 10)) }
		roomTemplate := roomsOf(fmt.Sprintf("{{mod .RequestNumber %d}}", rooms))
		if rooms == 1 {
			roomOf, roomTemplate = func(int64) string { return hot }, hot
		}
		return measured(name, l, opts.Commands, apiCall{
			method: "room.v1.RoomService/JoinRoom",
			template: fmt.Sprintf(`{"room_id":"%s","command_id":"%s{{.RequestNumber}}","operator_user_id":"{{add 1000 (mod .RequestNumber %d)}}"}`,
				roomTemplate, prefix, users),
			send: func(ctx context.Context, w int, i int64) error {
				return invoke(ctx, w, "room.v1.RoomService/JoinRoom", &roomv1.JoinRoomRequest{
					RoomId: roomOf(i), CommandId: prefix + strconv.FormatInt(i, 10), OperatorUserId: 1000 + i%int64(users),
				}, &roomv1.JoinRoomResponse{})
			},
			profile: profile,
		})
	}
	ofEngine := func(r *Row) {
		if opts.Engine > 0 {
			r.Extra = strings.TrimSuffix(fmt.Sprintf("%.0f%% of the engine in-process (target >= 50%%); %s", 100*r.Rate()/opts.Engine, r.Extra), "; ")
		}
	}
	if opts.runs("joins") {
		many, err := join(fmt.Sprintf("JoinRoom, %d rooms, 256 in flight", opts.Rooms), opts.Rooms, load{callers: 256}, 100_000,
			"  CPU by component")
		if err != nil {
			return nil, err
		}
		ofEngine(&many)
		ofFloor(&many)
		// The engine scenario drives its rooms with two callers each in
		// flight; through the API at that load the two compare like for like
		// (at 256 in flight the rate is bounded by in-flight / latency).
		engineLoad := 2 * opts.Rooms
		manyAtEngineLoad, err := join(fmt.Sprintf("JoinRoom, %d rooms, %d in flight (the engine's load)", opts.Rooms, engineLoad), opts.Rooms, load{callers: engineLoad}, 100_000, "")
		if err != nil {
			return nil, err
		}
		ofEngine(&manyAtEngineLoad)
		ofFloor(&manyAtEngineLoad)
		rows = append(rows, many)
		rows = append(rows, profiled...)
		rows = append(rows, manyAtEngineLoad)
	}
	// The hot room at three loads: 256 callers in flight (the engine
	// scenario's) and 64, closed loops that measure what the room carries,
	// and the target's own load, 5,000 joins a second offered whatever the
	// answers, which measures its latency there. In a closed loop the mean
	// latency is in-flight / rate (Little's law: 51 ms at 256 in flight and
	// 5,000/s), so the p99 of the closed rows says how fast the room
	// drains a queue that deep, not what a caller waits at 5,000/s.
	hotLoads := []load{{callers: 256}, {callers: 64}, {callers: 256, rate: hotRate}}
	if !opts.runs("hot") {
		hotLoads = nil
	}
	hotMembers, crowd := opts.HotMembers, ""
	if hotMembers <= 0 {
		hotMembers = DefaultHotMembers
	}
	if hotMembers != DefaultHotMembers {
		crowd = fmt.Sprintf(" of %d members", hotMembers)
	}
	for _, l := range hotLoads {
		name, target := fmt.Sprintf("JoinRoom, one hot room%s, %d in flight", crowd, l.callers), ""
		if l.rate > 0 {
			name = fmt.Sprintf("JoinRoom, one hot room%s, %.0f/s offered (open loop)", crowd, l.rate)
		}
		hot, err := join(name, 1, l, hotMembers, "")
		if err != nil {
			return nil, err
		}
		if l.rate > 0 {
			target = fmt.Sprintf("offered %.0f/s, achieved %.0f%%", l.rate, 100*hot.Rate()/l.rate)
		} else {
			target = fmt.Sprintf("target >= %d/s: %.2fx", hotRate, hot.Rate()/hotRate)
		}
		hot.Extra = strings.TrimSuffix(fmt.Sprintf("%s; p99 target <= 50 ms: %.2fx; %s", target, ms(hot.P99)/50, hot.Extra), "; ")
		ofFloor(&hot)
		rows = append(rows, hot)
	}
	if opts.runs("reads") {
		read, err := measured(fmt.Sprintf("GetRoomSnapshot, %d rooms, 128 in flight", opts.Rooms), load{callers: 128}, opts.Commands, apiCall{
			method:   "room.v1.RoomService/GetRoomSnapshot",
			template: fmt.Sprintf(`{"room_id":"%s"}`, roomsOf(fmt.Sprintf("{{mod .RequestNumber %d}}", opts.Rooms))),
			send: func(ctx context.Context, w int, i int64) error {
				id := roomsOf(strconv.FormatInt(i%int64(opts.Rooms), 10))
				var h snapshotHead
				if err := conns[w%len(conns)].Invoke(ctx, "/room.v1.RoomService/GetRoomSnapshot",
					&roomv1.GetRoomSnapshotRequest{RoomId: id}, &h, grpc.ForceCodecV2(headCodec{})); err != nil {
					return err
				}
				if h.roomID != id || h.notModified || h.snapVersion <= 0 || h.snapVersion != h.version {
					return fmt.Errorf("snapshot of %s: answered room %q at version %d (answer's %d, not_modified %v)", id, h.roomID, h.snapVersion, h.version, h.notModified)
				}
				return nil
			},
		})
		if err != nil {
			return nil, err
		}
		read.Extra = strings.TrimSuffix(fmt.Sprintf("target >= 20000/s: %.2fx; %s", read.Rate()/20000, read.Extra), "; ")
		ofFloor(&read)
		rows = append(rows, read)
	}
	rows = append(rows, driver.extra(time.Since(start)))
	// Leave the service as the run found it: closing the rooms ends their
	// members' presence, which would otherwise expire during a later run
	// against the same service and count against its rows.
	if err := closeRooms(ctx, created, roomsOf, invoke); err != nil {
		return rows, fmt.Errorf("close the run's rooms: %w", err)
	}
	return rows, nil
}

// closeRooms closes the rooms roomsOf(0) … roomsOf(n-1), 16 at a time, as
// their owner (user 1).
func closeRooms(ctx context.Context, n int, roomsOf func(string) string,
	invoke func(ctx context.Context, w int, method string, req, res proto.Message) error) error {
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	next := atomic.Int64{}
	for w := range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n) && failed.Load() == nil; i = next.Add(1) - 1 {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := invoke(cctx, w, "room.v1.RoomService/CloseRoom", &roomv1.CloseRoomRequest{
					RoomId: roomsOf(strconv.FormatInt(i, 10)), CommandId: "close", OperatorUserId: 1,
				}, &roomv1.CloseRoomResponse{})
				cancel()
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// ownDriver drives the calls from this process's client; its CPU is this
// process's.
type ownDriver struct{ cpu0 time.Duration }

func newOwnDriver() *ownDriver { return &ownDriver{cpu0: processCPU()} }

func (*ownDriver) drive(ctx context.Context, name string, l load, total int, c apiCall) (Row, error) {
	call := func(w int, i int64) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return c.send(ctx, w, i)
	}
	if l.rate <= 0 {
		return closedLoop(name, l.callers, total, call)
	}
	lat, elapsed, failed, err := openLoop(ctx, l.rate, total, func(i int) error { return call(i, int64(i)) })
	if err != nil {
		return Row{}, fmt.Errorf("%d of %d calls failed, the first: %w", failed, total, err)
	}
	secs := bySecond(lat, time.Duration(float64(time.Second)/l.rate)) // before percentiles sorts lat
	p50, p99 := percentiles(lat)
	return Row{Name: name, Ops: total, Elapsed: elapsed, P50: p50, P99: p99, Extra: secs.String()}, nil
}

func (*ownDriver) cpu() time.Duration { return processCPU() }

func (d *ownDriver) extra(wall time.Duration) Row {
	used := processCPU() - d.cpu0
	return Row{Name: "load generator CPU (this process)", Elapsed: wall,
		Extra: fmt.Sprintf("%.0f%% of %d cores over the run", 100*used.Seconds()/(wall.Seconds()*float64(runtime.NumCPU())), runtime.NumCPU())}
}

// ghzDriver drives the calls with ghz (github.com/bojand/ghz), a load
// generator independent of this code, which finds the methods through the
// service's gRPC reflection (served on the API port of a development
// server). Its CPU is the sum over its runs.
type ghzDriver struct {
	bin, base, token string
	conns            int
	used             time.Duration // CPU of the ghz runs so far
}

// ghzReport is the part of ghz's JSON report the table reads.
type ghzReport struct {
	Count          int64          `json:"count"`
	Total          time.Duration  `json:"total"`
	StatusCodeDist map[string]int `json:"statusCodeDistribution"`
	ErrorDist      map[string]int `json:"errorDistribution"`
	Latency        []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"`
	} `json:"latencyDistribution"`
}

func (d *ghzDriver) drive(ctx context.Context, name string, l load, total int, c apiCall) (Row, error) {
	host := strings.TrimPrefix(strings.TrimPrefix(d.base, "http://"), "https://")
	args := []string{"--insecure", "--call", c.method, "-d", c.template, "-c", strconv.Itoa(l.callers),
		"--connections", strconv.Itoa(min(d.conns, l.callers)), "-n", strconv.Itoa(total), "-t", "10s", "-O", "json"}
	if l.rate > 0 {
		// ghz paces its callers to the rate: a call waits for a free
		// caller, so keep many, and its latency counts from its start.
		args = append(args, "--rps", strconv.Itoa(int(l.rate)))
	}
	if d.token != "" {
		args = append(args, "-m", fmt.Sprintf(`{"authorization":"Bearer %s"}`, d.token))
	}
	cmd := exec.CommandContext(ctx, d.bin, append(args, strings.TrimSuffix(host, "/"))...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if cmd.ProcessState != nil {
		d.used += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return Row{}, fmt.Errorf("ghz: %w: %s", err, stderr.String())
	}
	var rep ghzReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return Row{}, fmt.Errorf("ghz report: %w", err)
	}
	if ok := rep.StatusCodeDist["OK"]; ok != total {
		return Row{}, fmt.Errorf("ghz: %d of %d calls OK: %v %v", ok, total, rep.StatusCodeDist, rep.ErrorDist)
	}
	r := Row{Name: name, Ops: int(rep.Count), Elapsed: rep.Total}
	for _, l := range rep.Latency {
		switch l.Percentage {
		case 50:
			r.P50 = l.Latency
		case 99:
			r.P99 = l.Latency
		}
	}
	return r, nil
}

func (d *ghzDriver) cpu() time.Duration { return d.used }

func (d *ghzDriver) extra(wall time.Duration) Row {
	return Row{Name: "load generator CPU (ghz)", Elapsed: wall,
		Extra: fmt.Sprintf("%.0f%% of %d cores over the run", 100*d.used.Seconds()/(wall.Seconds()*float64(runtime.NumCPU())), runtime.NumCPU())}
}
