package daemon

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// fleetBench turns on TestFleetFigures, which measures the fleet with
// service processes for a few minutes and prints a table:
//
//	go test ./internal/daemon -run TestFleetFigures -v -args -fleet-bench
var fleetBench = flag.Bool("fleet-bench", false, "measure the fleet (TestFleetFigures)")

// TestFleetFigures measures, with three service processes on MariaDB,
// Redis and NATS: a call served by its room's owner against the same call
// forwarded by another node; failover, from SIGKILL of a room's owner to the
// first command another node answers for it; hand-off, the longest pause a
// room's callers see while its owner stops with SIGTERM, and the commands
// the next owner replays; and joins per second on three nodes against one.
// It asserts nothing about speed: it prints what it measured beside the
// targets.
func TestFleetFigures(t *testing.T) {
	if !*fleetBench {
		t.Skip("a measurement: run with -fleet-bench")
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nfleet figures (lease TTL %v)\n", fleetTTL)
	fmt.Fprintf(&out, "%-44s %8s %10s %10s  %s\n", "measure", "samples", "p50", "p99", "compared with")

	f := newFleet(t, 3)
	a, b := f.nodes[0], f.nodes[1]
	roomID := f.run + "-hops"
	if _, err := a.client.CreateRoom(context.Background(), connect.NewRequest(&roomv1.CreateRoomRequest{
		RoomId: roomID, CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10,
	})); err != nil {
		t.Fatal(err)
	}
	var local, forwarded []time.Duration
	for i := range 600 {
		nd, into := a, &local
		if i%2 == 1 {
			nd, into = b, &forwarded
		}
		start := time.Now()
		if _, err := fleetJoin(nd, roomID, fmt.Sprint("hop-", i), int64(10+i)); err != nil {
			t.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	row(&out, "JoinRoom at the owner", local, "")
	row(&out, "JoinRoom forwarded by another node", forwarded, fmt.Sprintf("p50 +%v over the owner", pct(forwarded, 50)-pct(local, 50)))

	// Failover: kill a room's owner; time the first command another node answers.
	var failovers []time.Duration
	for trial := range 30 {
		owner, other := f.nodes[trial%3], f.nodes[(trial+1)%3]
		id := fmt.Sprintf("%s-fo%d", f.run, trial)
		if _, err := owner.client.CreateRoom(context.Background(), connect.NewRequest(&roomv1.CreateRoomRequest{
			RoomId: id, CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10,
		})); err != nil {
			t.Fatal(err)
		}
		if err := owner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		_ = owner.cmd.Wait()
		for i := 0; ; i++ {
			if _, err := fleetJoin(other, id, fmt.Sprint("after-kill-", i), int64(100+i)); err == nil {
				break
			} else if time.Since(killed) > time.Minute {
				t.Fatalf("room %s not served a minute after its owner died: %v", id, err)
			}
			time.Sleep(10 * time.Millisecond) // the probe's interval: the measure's resolution
		}
		failovers = append(failovers, time.Since(killed))
		f.start(owner)
	}
	row(&out, "failover: SIGKILL to the next answered command", failovers, fmt.Sprintf("target p99 <= TTL + 1s = %v", fleetTTL+time.Second))

	// Hand-off: the owner of 20 rooms stops with SIGTERM under load.
	owner := f.nodes[2]
	rooms := make([]string, 20)
	for i := range rooms {
		rooms[i] = fmt.Sprintf("%s-ho%d", f.run, i)
		if _, err := owner.client.CreateRoom(context.Background(), connect.NewRequest(&roomv1.CreateRoomRequest{
			RoomId: rooms[i], CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10,
		})); err != nil {
			t.Fatal(err)
		}
	}
	before := scrape(t, f.nodes[0], "room_replay_commands_sum") + scrape(t, f.nodes[1], "room_replay_commands_sum")
	stop := make(chan struct{})
	// Each room's caller notes when its calls succeed; a pause is the time
	// between two successes. The same callers' longest pause in the second
	// before SIGTERM is the baseline: on a loaded machine one call alone
	// can take that long.
	acked := make([][]time.Time, len(rooms))
	var wg sync.WaitGroup
	for r, id := range rooms {
		wg.Go(func() {
			acked[r] = append(acked[r], time.Now())
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				via := f.nodes[i%2] // the two nodes that stay
				// Title changes: the room does not grow, so its snapshots stay small.
				if _, err := f.call(30*time.Second, func(*node) (int64, error) { return fleetTitle(via, id, fmt.Sprint("ho-", i)) }); err != nil {
					t.Errorf("room %s during the hand-off: %v", id, err)
					return
				}
				acked[r] = append(acked[r], time.Now())
			}
		})
	}
	time.Sleep(time.Second) // load before the hand-off: a duration, not a condition
	term := time.Now()
	if err := owner.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = owner.cmd.Wait()
	time.Sleep(500 * time.Millisecond) // and after it
	close(stop)
	wg.Wait()
	after := scrape(t, f.nodes[0], "room_replay_commands_sum") + scrape(t, f.nodes[1], "room_replay_commands_sum")
	var pauses, baseline []time.Duration
	for _, at := range acked {
		var p, b time.Duration
		for i := 1; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			switch {
			case at[i].Before(term) && at[i-1].After(term.Add(-time.Second)):
				b = max(b, gap)
			case at[i].After(term):
				p = max(p, gap)
			}
		}
		pauses, baseline = append(pauses, p), append(baseline, b)
	}
	row(&out, "hand-off: longest pause of a room's callers", pauses, fmt.Sprintf("target p99 <= 100ms; p99 %+v over the baseline", pct(pauses, 99)-pct(baseline, 99)))
	row(&out, "  baseline: the same, in the second before", baseline, "")
	fmt.Fprintf(&out, "%-44s %8d %10s %10s  %s\n", "hand-off: commands replayed by the next owner", len(rooms), "-", "-",
		fmt.Sprintf("%.0f in all (target 0)", after-before))
	f.start(owner)

	// Throughput: joins across 100 rooms, through three nodes and through one.
	tput := func(nodes []*node) float64 {
		ids := make([]string, 100)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-tp%d-%d", f.run, len(nodes), i)
			if _, err := nodes[i%len(nodes)].client.CreateRoom(context.Background(), connect.NewRequest(&roomv1.CreateRoomRequest{
				RoomId: ids[i], CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10,
			})); err != nil {
				t.Fatal(err)
			}
		}
		var n atomic.Int64
		deadline := time.Now().Add(5 * time.Second)
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Go(func() {
				for i := 0; time.Now().Before(deadline); i++ {
					id := ids[(w*7+i)%len(ids)]
					if _, err := fleetJoin(nodes[(w+i)%len(nodes)], id, fmt.Sprintf("tp-%d-%d", w, i), int64(w*1_000_000+i+1)); err == nil {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return float64(n.Load()) / 5
	}
	one, three := tput(f.nodes[:1]), tput(f.nodes)
	fmt.Fprintf(&out, "%-44s %8s %10.0f %10s  %s\n", "joins/s, 100 rooms, 64 callers, one node", "-", one, "-", "")
	fmt.Fprintf(&out, "%-44s %8s %10.0f %10s  %s\n", "joins/s, 100 rooms, 64 callers, three nodes", "-", three, "-",
		fmt.Sprintf("%.2fx one node (2 cores shared by all three)", three/one))
	t.Log(out.String())
}

// fleetTitle is one UpdateProfile (the title) through nd.
func fleetTitle(nd *node, roomID, commandID string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	title := commandID
	res, err := nd.client.UpdateProfile(ctx, connect.NewRequest(&roomv1.UpdateProfileRequest{RoomId: roomID, CommandId: commandID, OperatorUserId: 1, Title: &title}))
	if err != nil {
		return 0, err
	}
	return res.Msg.GetRoomVersion(), nil
}

// scrape reads one series of a node's /metrics, such as
// room_replay_commands_sum or room_claims_total{kind="failover"}; 0 when the
// node has not reported it.
func scrape(t *testing.T, nd *node, series string) float64 {
	t.Helper()
	res, err := http.Get("http://" + nd.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return 0
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*p/100)]
}

func row(out io.Writer, what string, d []time.Duration, note string) {
	fmt.Fprintf(out, "%-44s %8d %10v %10v  %s\n", what, len(d), pct(d, 50).Round(10*time.Microsecond), pct(d, 99).Round(10*time.Microsecond), note)
}
