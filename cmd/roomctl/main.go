// Command roomctl is the operator CLI of room-service. It calls any
// RoomService, OperatorService or WalletService RPC by name, prints a room's live snapshot
// and durable command log, lists rooms, and verifies that replaying a room's
// log from its stored snapshot reproduces the live state.
//
// Exit status: 0 on success, 1 when an RPC fails or verify finds a
// difference, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/rpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// options are the global flags; every subcommand accepts them too, before or
// after its own arguments.
type options struct {
	addr    string
	token   secret
	timeout time.Duration
	grpc    bool
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "addr", o.addr, "room-service base URL (env ROOM_ADDR)")
	fs.Var(&o.token, "token", "service token sent as \"Authorization: Bearer <token>\" (env ROOM_TOKEN)")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "deadline of the whole command")
	fs.BoolVar(&o.grpc, "grpc", o.grpc, "speak gRPC (HTTP/2, h2c for http://) instead of the Connect protocol")
}

// secret is a string flag that usage output never shows, so a token taken
// from ROOM_TOKEN does not appear as the flag's default.
type secret string

func (s *secret) String() string { return "" }

func (s *secret) Set(v string) error {
	*s = secret(v)
	return nil
}

// subcommand is one verb of roomctl. setup registers its flags on fs and
// returns the function that runs it with its positional arguments.
type subcommand struct {
	name    string
	args    string // positional synopsis, for usage
	summary string
	minArgs int
	maxArgs int
	// long commands (load) run until done or interrupted, without -timeout.
	long  bool
	setup func(fs *flag.FlagSet) func(ctx context.Context, c *client, args []string, out io.Writer) error
}

var subcommands = []subcommand{
	{
		name: "call", args: "<Method> ['<json>']", minArgs: 1, maxArgs: 2,
		summary: "call any RoomService or OperatorService RPC with a protojson request; prints the response",
		setup:   setupCall,
	},
	{
		name: "snapshot", args: "<room_id> [-members N]", minArgs: 1, maxArgs: 1,
		summary: "print the room's live state (GetRoomSnapshot)",
		setup:   setupSnapshot,
	},
	{
		name: "log", args: "<room_id> [-after V] [-limit N]", minArgs: 1, maxArgs: 1,
		summary: "print the room's command log: version, command id, type, time, payload",
		setup:   setupLog,
	},
	{
		name: "verify", args: "<room_id>", minArgs: 1, maxArgs: 1,
		summary: "replay the stored snapshot and the log after it; compare with the live state",
		setup:   setupVerify,
	},
	{
		name: "rooms", args: "[-status open|closed|creating] [-page-size N]", minArgs: 0, maxArgs: 0,
		summary: "list rooms, one line each",
		setup:   setupRooms,
	},
	{
		name: "bench", args: "[-only throughput,hot,recovery,memory] [-rooms N] [-commands N] ...", minArgs: 0, maxArgs: 0,
		summary: "measure the engine on a fresh local database beside ceilings measured in the same run; prints tables",
		setup:   setupBench, long: true,
	},
	{
		name: "outbox", args: "status | requeue [-type EventType]", minArgs: 1, maxArgs: 1,
		summary: "show the durable outbox (pending, oldest age, dead rows by type) or requeue dead rows",
		setup:   setupOutbox,
	},
	{
		name: "events", args: "tail [-nats-url URL] [-type T] [-room R] [-durable NAME] [-n N]", minArgs: 1, maxArgs: 1,
		summary: "consume durable room events from NATS JetStream, dropping duplicates by event_id; one JSON line each",
		setup:   setupEvents, long: true,
	},
	{
		name: "im", args: "status [-nats-url URL] [-n N]", minArgs: 1, maxArgs: 1,
		summary: "show IM group control: events waiting and in flight, and the events it terminated by type and reason",
		setup:   setupIM,
	},
	{
		name: "wallet", args: "credit <user_id> <amount> [-key K] | balance <user_id>", minArgs: 2, maxArgs: 3,
		summary: "credit COIN to a user once per key (CreditCoins) or print a user's balance (GetBalance)",
		setup:   setupWallet,
	},
	{
		name: "cluster", args: "[-rooms]", minArgs: 0, maxArgs: 0,
		summary: "list the fleet's nodes (address, rooms held, draining, heartbeat age) with ListNodes; -rooms names the rooms",
		setup:   setupCluster,
	},
	{
		name: "drain", args: "<node_id>", minArgs: 1, maxArgs: 1,
		summary: "drain a node through any node (Drain): it hands off every room it holds and stays up as a router",
		setup:   setupDrain,
	},
	{
		name: "gifts", args: "", minArgs: 0, maxArgs: 0,
		summary: "print the gift catalogue (ListGifts)",
		setup:   setupGifts,
	},
	{
		name: "migrate", args: "-mysql-dsn DSN", minArgs: 0, maxArgs: 0,
		summary: "apply the embedded schema migrations to a MySQL/MariaDB database (the service also does on start)",
		setup:   setupMigrate, long: true,
	},
}

// usageError is a mistake in the command line; run answers it with exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// errMismatch reports a failed verify; the details are already printed.
var errMismatch = errors.New("replayed state differs from the live state")

// run is roomctl without the process: it parses args, runs one subcommand
// and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := options{addr: "http://127.0.0.1:8080", timeout: 10 * time.Second}
	if v := os.Getenv("ROOM_ADDR"); v != "" {
		opts.addr = v
	}
	opts.token = secret(os.Getenv("ROOM_TOKEN"))

	top := flag.NewFlagSet("roomctl", flag.ContinueOnError)
	top.SetOutput(stderr)
	top.Usage = func() { usage(stderr, top) }
	opts.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if top.NArg() == 0 {
		usage(stderr, top)
		return exitUsage
	}
	name := top.Arg(0)
	if name == "help" {
		usage(stdout, top)
		return exitOK
	}
	var sub *subcommand
	for i := range subcommands {
		if subcommands[i].name == name {
			sub = &subcommands[i]
		}
	}
	if sub == nil {
		fmt.Fprintf(stderr, "roomctl: unknown command %q (run \"roomctl help\")\n", name)
		return exitUsage
	}

	fs := flag.NewFlagSet("roomctl "+sub.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts.register(fs)
	runSub := sub.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: roomctl %s %s\n\n%s\n\nflags:\n", sub.name, sub.args, sub.summary)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, top.Args()[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if len(pos) < sub.minArgs || len(pos) > sub.maxArgs {
		fmt.Fprintf(stderr, "roomctl: usage: roomctl %s %s\n", sub.name, sub.args)
		return exitUsage
	}

	if !sub.long {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.timeout)
		defer cancel()
	}
	c := newClient(opts)
	defer c.close()
	return report(stderr, runSub(ctx, c, pos, stdout))
}

// report prints err and returns the exit status it means. An RPC error
// shows its Connect code, its stable reason and its message.
func report(stderr io.Writer, err error) int {
	var (
		ue *usageError
		ce *connect.Error
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "roomctl:", ue.msg)
		return exitUsage
	case errors.Is(err, errMismatch):
		return exitFail
	case errors.As(err, &ce):
		reason := rpc.Reason(err)
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(stderr, "roomctl: %v\ncode=%s reason=%s message=%q\n", err, ce.Code(), reason, ce.Message())
		return exitFail
	default:
		fmt.Fprintln(stderr, "roomctl:", err)
		return exitFail
	}
}

// parseInterleaved parses fs from args, letting flags and positional
// arguments come in any order ("snapshot r1 -members 5"). Everything after
// "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func usage(w io.Writer, top *flag.FlagSet) {
	fmt.Fprintln(w, "usage: roomctl [global flags] <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	for _, s := range subcommands {
		fmt.Fprintf(w, "  %s %s\n        %s\n", s.name, s.args, s.summary)
	}
	fmt.Fprintln(w, "  help\n        print this message")
	fmt.Fprintln(w, "\nglobal flags (accepted before or after the command):")
	prev := top.Output()
	top.SetOutput(w)
	top.PrintDefaults()
	top.SetOutput(prev)
	fmt.Fprintln(w, "\nexit status: 0 ok, 1 RPC error or verify mismatch, 2 usage error")
}

// client holds the generated Connect clients of both services.
type client struct {
	base    string // the service's base URL
	token   string
	http    *http.Client
	rooms   roomv1connect.RoomServiceClient
	ops     roomv1connect.OperatorServiceClient
	wallets roomv1connect.WalletServiceClient
}

func newClient(o options) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	var copts []connect.ClientOption
	if o.grpc {
		// gRPC needs HTTP/2: h2c (prior knowledge) for http://, ALPN for https://.
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		p.SetHTTP2(true)
		tr.Protocols = p
		copts = append(copts, connect.WithGRPC())
	}
	if o.token != "" {
		copts = append(copts, connect.WithInterceptors(bearer(string(o.token))))
	}
	hc := &http.Client{Transport: tr}
	base := strings.TrimSuffix(o.addr, "/")
	return &client{
		base: base, token: string(o.token),
		http:    hc,
		rooms:   roomv1connect.NewRoomServiceClient(hc, base, copts...),
		ops:     roomv1connect.NewOperatorServiceClient(hc, base, copts...),
		wallets: roomv1connect.NewWalletServiceClient(hc, base, copts...),
	}
}

// close releases idle connections so nothing outlives the command.
func (c *client) close() { c.http.CloseIdleConnections() }

// bearer adds the service token to every call.
func bearer(token string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set(rpc.Authorization(token))
			return next(ctx, req)
		}
	}
}
