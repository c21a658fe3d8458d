// Package bench measures the room engine against ceilings measured in the
// same run: throughput across many rooms, one hot room, recovery and memory.
// roomctl bench prints its tables; nothing here asserts a wall-clock number.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// Row is one measured line of a table.
type Row struct {
	Name    string
	Ops     int           // commands (or rows, rooms) done
	Elapsed time.Duration // wall time
	P50     time.Duration // reply latency, when measured
	P99     time.Duration
	Extra   string // what the row is compared with
}

// Rate is Ops per second.
func (r Row) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Print writes rows as an aligned table.
func Print(w io.Writer, title string, rows []Row) {
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tops\tseconds\tops/s\tp50 ms\tp99 ms\tcompared with\t")
	for _, r := range rows {
		p50, p99 := "-", "-"
		if r.P99 > 0 {
			p50, p99 = fmt.Sprintf("%.2f", ms(r.P50)), fmt.Sprintf("%.2f", ms(r.P99))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t\n", r.Name, r.Ops, r.Elapsed.Seconds(), r.Rate(), p50, p99, r.Extra)
	}
	_ = tw.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Env is what a scenario needs: a fresh repository for each measurement and
// a bare batched insert of the same rows on the same kind of database.
type Env struct {
	// Open returns an empty repository; the scenario closes it.
	Open func(ctx context.Context) (store.Repository, error)
	// BareInsert inserts n commands' rows (one log row and one outbox row
	// each, like the engine's) in transactions of batch commands, with conns
	// parallel writers, and returns the elapsed time.
	BareInsert func(ctx context.Context, n, batch, conns int) (time.Duration, error)
	// CommitWorkers is the engine's group-commit parallelism for this database.
	CommitWorkers int
	// CommitMaxRooms bounds the room batches of one transaction (0: the engine's default).
	CommitMaxRooms int
}

// engineConfig is the engine configuration this environment runs with.
func (e Env) engineConfig() cell.Config {
	return cell.Config{CommitWorkers: e.CommitWorkers, CommitMaxRooms: e.CommitMaxRooms, Linger: cell.DefaultLinger, CommitLinger: cell.DefaultCommitLinger}
}

var quiet = slog.New(slog.DiscardHandler)

type nopSink struct{}

func (nopSink) Publish([]room.Committed) {}

func newRegistry(repo store.Repository, cfg cell.Config) *cell.Registry {
	return cell.New(cfg, repo, lease.NewLocal(), nopSink{}, nil, quiet)
}

// createRooms creates n rooms named prefix-0.. through reg, in parallel.
func createRooms(ctx context.Context, reg *cell.Registry, prefix string, n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	err := parallel(64, n, func(i int) error {
		_, err := reg.Submit(ctx, &room.Envelope{RoomID: ids[i], CommandID: "create", Operator: 1,
			Command: &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "bench"}})
		return err
	})
	return ids, err
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// join is the load command: user joins (always valid, one outbox row; a
// user already in the room re-joins).
func join(roomID string, seq, user int64) *room.Envelope {
	return &room.Envelope{RoomID: roomID, CommandID: fmt.Sprintf("j-%d", seq), Operator: user,
		Command: &room.JoinRoom{Nickname: "listener", Vehicle: "car-7"}}
}

// drive sends total join commands spread over rooms, perRoom callers in
// flight per room, users drawn from a pool of users, and returns the row
// with reply latencies.
func drive(ctx context.Context, reg *cell.Registry, name string, rooms []string, perRoom, total, users int) (Row, error) {
	callers := len(rooms) * perRoom
	return closedLoop(name, callers, total, func(w int, i int64) error {
		if _, err := reg.Submit(ctx, join(rooms[w%len(rooms)], i, 1000+i%int64(users))); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// closedLoop runs send(caller, i) for i in 0..total-1 from callers
// goroutines, each sending its next command when the last one answered, and
// returns the row with the latency of each send.
func closedLoop(name string, callers, total int, send func(caller int, i int64) error) (Row, error) {
	lat := make([]time.Duration, total)
	var next atomic.Int64
	start := time.Now()
	err := parallel(callers, callers, func(w int) error {
		for {
			i := next.Add(1) - 1
			if i >= int64(total) {
				return nil
			}
			t0 := time.Now()
			if err := send(w, i); err != nil {
				return err
			}
			lat[i] = time.Since(t0)
		}
	})
	elapsed := time.Since(start)
	p50, p99 := percentiles(lat)
	return Row{Name: name, Ops: total, Elapsed: elapsed, P50: p50, P99: p99}, err
}

// openLoop offers n calls of send(i) at rate per second whatever their
// answers, each in a goroutine of its own, and returns when all answered:
// each call's latency counted from when it was due (not from when it
// started, which a late generator would flatter), the run's wall time, how
// many calls failed and the first failure. The load does not wait for a
// slow service, so a tail it measures is the service's at that load, not
// the queue of a closed loop (in which the mean latency is in-flight / rate).
func openLoop(ctx context.Context, rate float64, n int, send func(i int) error) (lat []time.Duration, elapsed time.Duration, failed int64, first error) {
	interval := time.Duration(float64(time.Second) / rate)
	lat = make([]time.Duration, n)
	var fails atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for i := 0; i < n; {
		for due := min(int(time.Since(start)/interval)+1, n); i < due; i++ {
			j, at := i, start.Add(time.Duration(i)*interval) // i moves on before the send ends
			wg.Go(func() {
				err := send(j)
				lat[j] = time.Since(at)
				if err != nil {
					fails.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			})
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return lat, time.Since(start), fails.Load(), ctx.Err()
		case <-tick.C:
		}
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		first = *err
	}
	return lat, time.Since(start), fails.Load(), first
}

// percentiles sorts lat and returns its median and 99th percentile.
func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}
