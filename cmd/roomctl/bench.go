package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"hyapp/room-service/bench"
	"hyapp/room-service/config"
	"hyapp/room-service/store/mysql"
)

// setupBench registers the flags of "roomctl bench".
func setupBench(fs *flag.FlagSet) func(ctx context.Context, _ *client, _ []string, out io.Writer) error {
	only := fs.String("only", "throughput,hot,recovery,memory,relay,im,im-hot", "scenarios to run, comma-separated (also: gifts = gift-storm,gift-rooms; netwake: how late a saturated Go process hears its sockets)")
	imFor := fs.Duration("im-duration", 15*time.Second, "how long each IM scenario drives load")
	imRooms := fs.String("im-rooms", "300,1000", "im: rooms with traffic, comma-separated")
	imRate := fs.String("im-rate", "2", "im: mic changes per second per room, comma-separated")
	imBudget := fs.String("im-budget", "200", "im: Tencent app budget of send_group_msg (calls/s), comma-separated")
	relayEvents := fs.Int("relay-events", 100_000, "events in the relay throughput scenario")
	relayRate := fs.Int("relay-rate", 1000, "steady input rate (events/s) of the relay lag and outage scenarios")
	outage := fs.Duration("outage", 60*time.Second, "broker outage in the relay drain scenario")
	dir := fs.String("dir", "", "directory for the benchmark databases (default: a new temporary directory, removed afterwards)")
	rooms := fs.Int("rooms", 1000, "rooms in the throughput scenario")
	commands := fs.Int("commands", 100_000, "commands in the throughput scenario")
	hotCallers := fs.Int("hot-callers", 256, "callers in flight in the hot room")
	hotCommands := fs.Int("hot-commands", 50_000, "commands in the hot room")
	hotReaders := fs.Int("hot-readers", 0, "goroutines reading the in-process hot room's snapshot, each every 2 ms, while it runs")
	hotMembers := fs.Int("hot-members", bench.DefaultHotMembers, "distinct users joining the hot room, in-process and through the API (its audience once all joined)")
	tail := fs.Int("tail", 10_000, "commands after the snapshot in the recovery scenario (10,000: the most a large room's log runs past its snapshot at snapshot_every 500)")
	crowd := fs.Int("crowd", 50_000, "members of the crowded room in the recovery scenario")
	idleRooms := fs.Int("idle-rooms", 50_000, "rooms in the memory scenario")
	giftCallers := fs.Int("gift-callers", 256, "callers in flight in the gift storm room")
	giftCount := fs.Int("gift-count", 50_000, "gifts in each gift storm (and plain joins in its comparison)")
	giftLatency := fs.Duration("gift-wallet-latency", 5*time.Millisecond, "latency of every call to the remote-style wallet of the second gift storm")
	giftRooms := fs.Int("gift-rooms", 1000, "rooms in the paced gift scenario")
	giftRoomRate := fs.Float64("gift-room-rate", 5, "gifts per second per room in the paced gift scenario")
	giftRoomsFor := fs.Duration("gift-rooms-duration", 20*time.Second, "how long the paced gift scenario drives load")
	maxRooms := fs.Int("commit-max-rooms", 0, "room batches per group-commit transaction (0: the engine's default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	api := fs.Bool("api", false, "measure the engine scenarios of -only (default then: throughput,hot), then in the same run the running service at -addr through its API (gRPC over HTTP/2), its joins against the engine's rate")
	apiCommands := fs.Int("api-commands", 50_000, "calls in each API scenario")
	apiConns := fs.Int("api-conns", 8, "HTTP/2 connections the API scenarios' calls spread over")
	ghz := fs.String("ghz", "", "with -api, also drive the API scenarios with this ghz binary (go install github.com/bojand/ghz/cmd/ghz@v0.120.0), an independent load generator; needs gRPC reflection on the API port (a development server)")
	apiListen := fs.Bool("api-listen", true, "with -api, measure the service at -addr (its listen port); false with -grpc-addr measures the gRPC transport only")
	apiScenarios := fs.String("api-scenarios", "", "with -api, the API scenarios to run, comma-separated, of "+strings.Join(bench.APIScenarioNames, ",")+" (default: all; the transport's ceiling and the rooms' creation always run)")
	apiProfile := fs.String("api-profile", "", "with -api, profile the service from its admin listener at this base URL (its admin_listen: http://127.0.0.1:PORT, which serves /debug/pprof/) during the "+
		"1,000-room joins at 256 in flight, and print its CPU and allocations by component after that row")
	apiProfileFor := fs.Duration("api-profile-duration", bench.DefaultProfileFor, "with -api-profile, how long the profile runs (whole seconds)")
	grpcAddr := fs.String("grpc-addr", "", "with -api, also measure the service's gRPC transport at this address (its grpc_listen: 127.0.0.1:9090 with zero configuration)")
	mysqlDSN := fs.String("mysql-dsn", os.Getenv("ROOM_MYSQL_DSN"), "run on this MySQL/MariaDB server (fresh databases, dropped afterwards) instead of SQLite (env ROOM_MYSQL_DSN)")
	return func(ctx context.Context, c *client, _ []string, out io.Writer) error {
		if *api && !flagSet(fs, "only") {
			*only = "throughput,hot"
		}
		if os.Getenv("GOGC") == "" {
			// The engine runs here under the collector setting it has in
			// the service (gc_percent), and so does the load generator,
			// which at the runtime's default spent about a sixth of its
			// CPU in the collector, on the cores it shares with the
			// service.
			defer debug.SetGCPercent(debug.SetGCPercent(config.Default().GCPercent))
		}
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		var env bench.Env
		if *mysqlDSN != "" {
			e, cleanup, err := bench.MySQL(*mysqlDSN, "roombench", *maxRooms)
			if err != nil {
				return err
			}
			defer func() { _ = cleanup(context.WithoutCancel(ctx)) }()
			env = e
			fmt.Fprintf(out, "room-service engine on MySQL (%d commit connections)\n", env.CommitWorkers)
		} else {
			d := *dir
			if d == "" {
				tmp, err := os.MkdirTemp("", "roomctl-bench-")
				if err != nil {
					return err
				}
				defer func() { _ = os.RemoveAll(tmp) }()
				d = tmp
			}
			env = bench.SQLite(d)
			fmt.Fprintf(out, "room-service engine on SQLite (synchronous=FULL) in %s\n", d)
		}
		var names []string
		var engine float64 // the in-process 1,000-room rate, when measured
		for _, name := range strings.Split(*only, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			} else if name == "gifts" {
				names = append(names, "gift-storm", "gift-rooms")
				continue
			}
			names = append(names, name)
		}
		for _, name := range names {
			var rows []bench.Row
			var err error
			switch name {
			case "throughput":
				rows, err = bench.Throughput(ctx, env, *rooms, *commands)
			case "hot":
				var r bench.Row
				r, err = bench.HotRoom(ctx, env, *hotCallers, *hotCommands, *hotMembers, *hotReaders)
				rows = []bench.Row{r}
			case "recovery":
				rows, err = bench.Recovery(ctx, env, *tail, *crowd)
			case "relay":
				rdir, derr := os.MkdirTemp("", "roomctl-relay-")
				if derr != nil {
					return derr
				}
				rows, err = bench.RelayScenarios(ctx, env, rdir, *relayEvents, *relayRate, *outage)
				_ = os.RemoveAll(rdir)
			case "im":
				var cases []bench.IMBudgetCase
				cases, err = imCases(*imRooms, *imRate, *imBudget)
				for _, c := range cases {
					var r []bench.Row
					if r, err = bench.IMBudget(ctx, env, c, *imFor); err != nil {
						break
					}
					rows = append(rows, r...)
				}
			case "im-hot":
				rows, err = bench.IMScenario(ctx, env, 1000, 1000, 10, *imFor)
			case "gift-storm":
				rows, err = bench.GiftStorm(ctx, env, *giftCallers, *giftCount, *giftLatency)
			case "gift-rooms":
				rows, err = bench.GiftRooms(ctx, env, *giftRooms, *giftRoomRate, *giftRoomsFor)
			case "netwake":
				rows, err = bench.NetWake(ctx, []int{0, 4, 64}, 2*time.Second)
			case "memory":
				var r bench.Row
				r, err = bench.Memory(ctx, env, *idleRooms)
				rows = []bench.Row{r}
			default:
				return usagef("unknown scenario %q", name)
			}
			if err == nil || (name == "gift-rooms" && len(rows) > 0) {
				bench.Print(out, name, rows) // a failed ledger check shows what it measured
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if name == "throughput" {
				for _, r := range rows {
					if strings.HasSuffix(r.Name, " rooms") {
						engine = r.Rate()
					}
				}
			}
		}
		if *api {
			// After the engine, while the service is quiet: its rate is
			// what the API's rows are read against.
			var scenarios []string
			for _, name := range strings.Split(*apiScenarios, ",") {
				if name = strings.TrimSpace(name); name == "" {
					continue
				} else if !slices.Contains(bench.APIScenarioNames, name) {
					return usagef("-api-scenarios: unknown scenario %q (known: %s)", name, strings.Join(bench.APIScenarioNames, ","))
				}
				scenarios = append(scenarios, name)
			}
			if *apiProfile != "" {
				if u, err := url.Parse(*apiProfile); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return usagef("-api-profile %q: want the admin listener's base URL, http://host:port", *apiProfile)
				}
			}
			if *apiProfileFor < time.Second {
				return usagef("-api-profile-duration %v: want at least 1s", *apiProfileFor)
			}
			return benchAPI(ctx, c, out, *apiListen, bench.APIOptions{Token: c.token, Conns: *apiConns, Rooms: *rooms, Commands: *apiCommands, GRPC: *grpcAddr, Ghz: *ghz, Engine: engine, HotMembers: *hotMembers, Scenarios: scenarios,
				Profile: *apiProfile, ProfileFor: *apiProfileFor})
		}
		return nil
	}
}

// imCases is every combination of the im scenario's rooms, rates and budgets.
func imCases(roomsFlag, ratesFlag, budgetsFlag string) ([]bench.IMBudgetCase, error) {
	list := func(flag, v string, positive func(float64) bool) ([]float64, error) {
		var out []float64
		for _, part := range strings.Split(v, ",") {
			f, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
			if err != nil || !positive(f) {
				return nil, usagef("-%s %q: want positive numbers, comma-separated", flag, v)
			}
			out = append(out, f)
		}
		return out, nil
	}
	whole := func(f float64) bool { return f >= 1 && f == float64(int(f)) }
	rooms, err := list("im-rooms", roomsFlag, whole)
	if err != nil {
		return nil, err
	}
	rates, err := list("im-rate", ratesFlag, func(f float64) bool { return f > 0 && f <= 1000 })
	if err != nil {
		return nil, err
	}
	budgets, err := list("im-budget", budgetsFlag, whole)
	if err != nil {
		return nil, err
	}
	var out []bench.IMBudgetCase
	for _, r := range rooms {
		for _, rate := range rates {
			for _, b := range budgets {
				out = append(out, bench.IMBudgetCase{Rooms: int(r), Rate: rate, Budget: int(b)})
			}
		}
	}
	return out, nil
}

// setupMigrate registers the flags of "roomctl migrate".
func setupMigrate(fs *flag.FlagSet) func(ctx context.Context, _ *client, _ []string, out io.Writer) error {
	dsn := fs.String("mysql-dsn", os.Getenv("ROOM_MYSQL_DSN"), "MySQL/MariaDB DSN (env ROOM_MYSQL_DSN)")
	return func(ctx context.Context, _ *client, _ []string, out io.Writer) error {
		if *dsn == "" {
			return usagef("migrate needs -mysql-dsn (or ROOM_MYSQL_DSN)")
		}
		if err := mysql.Migrate(ctx, *dsn); err != nil {
			return err
		}
		fmt.Fprintln(out, "ok: schema is current")
		return nil
	}
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// benchAPI measures the running service through its API: the calls to
// -addr, then with opts.GRPC to its gRPC transport, each driven by this
// command's client and with opts.Ghz by ghz; a table each.
func benchAPI(ctx context.Context, c *client, out io.Writer, listen bool, opts bench.APIOptions) error {
	var targets []string
	if listen || opts.GRPC == "" {
		targets = append(targets, "")
	}
	if opts.GRPC != "" {
		targets = append(targets, opts.GRPC)
	}
	drivers := []string{""}
	if opts.Ghz != "" {
		drivers = append(drivers, opts.Ghz)
	}
	for _, target := range targets {
		for _, ghz := range drivers {
			o := opts
			o.GRPC, o.Ghz, o.Run = target, ghz, fmt.Sprintf("b%d", time.Now().UnixNano()%1e9)
			title := "the service at " + c.base + ", through its API"
			if target != "" {
				title = "the service's gRPC transport at " + target + ", through its API"
			}
			if ghz != "" {
				title += ", driven by ghz"
			}
			rows, err := bench.APIScenarios(ctx, c.base, o)
			if err != nil {
				return fmt.Errorf("%s: %w", title, err)
			}
			bench.Print(out, title, rows)
		}
	}
	return nil
}
