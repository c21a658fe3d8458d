package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"hyapp/room-service/bench"
)

// setupBench registers the flags of "roomctl bench".
func setupBench(fs *flag.FlagSet) func(ctx context.Context, _ *client, _ []string, out io.Writer) error {
	only := fs.String("only", "throughput,hot,recovery,memory", "scenarios to run, comma-separated")
	dir := fs.String("dir", "", "directory for the benchmark databases (default: a new temporary directory, removed afterwards)")
	rooms := fs.Int("rooms", 1000, "rooms in the throughput scenario")
	commands := fs.Int("commands", 100_000, "commands in the throughput scenario")
	hotCallers := fs.Int("hot-callers", 256, "callers in flight in the hot room")
	hotCommands := fs.Int("hot-commands", 50_000, "commands in the hot room")
	tail := fs.Int("tail", 10_000, "commands after the snapshot in the recovery scenario")
	idleRooms := fs.Int("idle-rooms", 50_000, "rooms in the memory scenario")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	return func(ctx context.Context, _ *client, _ []string, out io.Writer) error {
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
		d := *dir
		if d == "" {
			tmp, err := os.MkdirTemp("", "roomctl-bench-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(tmp) }()
			d = tmp
		}
		env := bench.SQLite(d)
		fmt.Fprintf(out, "room-service engine on SQLite (synchronous=FULL) in %s\n", d)
		for _, name := range strings.Split(*only, ",") {
			var rows []bench.Row
			var err error
			switch strings.TrimSpace(name) {
			case "throughput":
				rows, err = bench.Throughput(ctx, env, *rooms, *commands)
			case "hot":
				var r bench.Row
				r, err = bench.HotRoom(ctx, env, *hotCallers, *hotCommands)
				rows = []bench.Row{r}
			case "recovery":
				rows, err = bench.Recovery(ctx, env, *tail)
			case "memory":
				var r bench.Row
				r, err = bench.Memory(ctx, env, *idleRooms)
				rows = []bench.Row{r}
			default:
				return usagef("unknown scenario %q", name)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			bench.Print(out, name, rows)
		}
		return nil
	}
}
