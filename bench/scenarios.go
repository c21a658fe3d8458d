package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// Throughput measures durable commands per second across rooms through the
// engine, beside the bare batched insert of the same rows (the hardware
// ceiling) and the same engine committing one transaction per command.
func Throughput(ctx context.Context, env Env, rooms, total int) ([]Row, error) {
	bare, err := env.BareInsert(ctx, total, 64, env.CommitWorkers)
	if err != nil {
		return nil, fmt.Errorf("bare insert: %w", err)
	}
	ceiling := Row{Name: "bare insert, batches of 64", Ops: total, Elapsed: bare, Extra: "the ceiling"}

	engine, err := withEngine(ctx, env, env.engineConfig(), func(reg *cell.Registry) (Row, error) {
		ids, err := createRooms(ctx, reg, "tp", rooms)
		if err != nil {
			return Row{}, err
		}
		return drive(ctx, reg, fmt.Sprintf("engine, %d rooms", rooms), ids, 2, total, 100_000)
	})
	if err != nil {
		return nil, err
	}
	perTotal := max(total/10, 1000)
	perCommand := env.engineConfig()
	perCommand.MaxBatch, perCommand.CommitMaxRooms = 1, 1
	single, err := withEngine(ctx, env, perCommand,
		func(reg *cell.Registry) (Row, error) {
			ids, err := createRooms(ctx, reg, "one", rooms)
			if err != nil {
				return Row{}, err
			}
			return drive(ctx, reg, "engine, one txn per command", ids, 2, perTotal, 100_000)
		})
	if err != nil {
		return nil, err
	}
	engine.Extra = fmt.Sprintf("%.0f%% of ceiling (target >= 50%%), %.1fx one-txn (target >= 10x)",
		100*engine.Rate()/ceiling.Rate(), engine.Rate()/single.Rate())
	single.Extra = "the per-command baseline"
	return []Row{ceiling, engine, single}, nil
}

// HotRoom measures one room under total commands from callers in flight,
// joins of members distinct users (the room's audience once they all
// joined), while readers read the room's snapshot, each every 2 ms, as
// clients repairing what they missed do.
func HotRoom(ctx context.Context, env Env, callers, total, members, readers int) (Row, error) {
	return withEngine(ctx, env, env.engineConfig(), func(reg *cell.Registry) (Row, error) {
		ids, err := createRooms(ctx, reg, "hot", 1)
		if err != nil {
			return Row{}, err
		}
		name := fmt.Sprintf("one hot room, %d callers, %d members", callers, members)
		if readers > 0 {
			name += fmt.Sprintf(", %d readers", readers)
		}
		var reads atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range readers {
			wg.Go(func() {
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := reg.Snapshot(ctx, ids[0]); err == nil {
						reads.Add(1)
					}
				}
			})
		}
		r, err := drive(ctx, reg, name, ids, callers, total, members)
		close(stop)
		wg.Wait()
		r.Extra = fmt.Sprintf("target >= 5000/s: %.1fx; p99 target <= 50 ms: %.2fx", r.Rate()/5000, ms(r.P99)/50)
		if readers > 0 {
			r.Extra += fmt.Sprintf("; %.0f snapshot reads/s of %d asked", float64(reads.Load())/r.Elapsed.Seconds(), readers*500)
		}
		return r, err
	})
}

// Recovery measures rebuilding a room whose log has tail commands after its
// snapshot, the same room from a fresh snapshot, and a room of members
// members with tail commands after its snapshot.
func Recovery(ctx context.Context, env Env, tail, members int) ([]Row, error) {
	repo, err := env.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = repo.Close() }()
	cfg := env.engineConfig()
	cfg.SnapshotEvery = 10 * tail
	reg := newRegistry(repo, cfg)
	defer func() { _ = reg.Close(ctx) }()
	ids, err := createRooms(ctx, reg, "rec", 1)
	if err != nil {
		return nil, err
	}
	if _, err := drive(ctx, reg, "fill", ids, 64, tail, 500); err != nil {
		return nil, err
	}
	meta, _, err := repo.GetRoomMeta(ctx, ids[0])
	if err != nil {
		return nil, err
	}
	long, err := timeRecover(ctx, repo, meta, tail+1)
	if err != nil {
		return nil, err
	}
	long.Name = fmt.Sprintf("recover, %d-command tail", tail)
	long.Extra = fmt.Sprintf("target <= 200 ms: %.2fx", ms(long.P50)/200)

	st, err := storeSnapshot(ctx, reg, repo, ids[0])
	if err != nil {
		return nil, err
	}
	fresh, err := timeRecover(ctx, repo, meta, 0)
	if err != nil {
		return nil, err
	}
	fresh.Name = fmt.Sprintf("recover, fresh snapshot (%d members)", len(st.Members))
	fresh.Extra = fmt.Sprintf("target <= 5 ms: %.2fx", ms(fresh.P50)/5)

	// A crowded room at the longest tail its snapshots leave: members
	// distinct users joined, a snapshot of them, then tail commands more
	// (a room whose snapshot outweighs its log runs at most
	// cell.SnapshotStretch × snapshot_every commands past its snapshot).
	crowd, err := createRooms(ctx, reg, "crowd", 1)
	if err != nil {
		return nil, err
	}
	if _, err := drive(ctx, reg, "crowd", crowd, 64, members, members); err != nil {
		return nil, err
	}
	big, err := storeSnapshot(ctx, reg, repo, crowd[0])
	if err != nil {
		return nil, err
	}
	if _, err := closedLoop("crowd tail", 64, tail, func(_ int, i int64) error {
		_, err := reg.Submit(ctx, join(crowd[0], int64(members)+i, 1000+i%int64(members)))
		return err
	}); err != nil {
		return nil, err
	}
	head, err := reg.Snapshot(ctx, crowd[0])
	if err != nil {
		return nil, err
	}
	if meta, _, err = repo.GetRoomMeta(ctx, crowd[0]); err != nil {
		return nil, err
	}
	crowded, err := timeRecover(ctx, repo, meta, int(head.GetRoomVersion()-big.Version))
	if err != nil {
		return nil, err
	}
	crowded.Name = fmt.Sprintf("recover, %d members, %d-command tail", len(big.Members), crowded.Ops)
	crowded.Extra = fmt.Sprintf("target <= 200 ms: %.2fx", ms(crowded.P50)/200)
	return []Row{long, fresh, crowded}, nil
}

// storeSnapshot stores a snapshot of the room's current state, as its cell
// would, and returns that state.
func storeSnapshot(ctx context.Context, reg *cell.Registry, repo store.Repository, roomID string) (*room.State, error) {
	snap, err := reg.Snapshot(ctx, roomID)
	if err != nil {
		return nil, err
	}
	st, err := snapshot.FromProto(snap)
	if err != nil {
		return nil, err
	}
	payload, err := snapshot.Encode(st)
	if err != nil {
		return nil, err
	}
	err = repo.SaveSnapshot(ctx, store.SnapshotRecord{RoomID: roomID, RoomVersion: st.Version, Payload: payload, CreatedAt: time.Now()})
	return st, err
}

// timeRecover recovers the room several times; P50 and P99 are of single
// recoveries, Ops the commands replayed by one.
func timeRecover(ctx context.Context, repo store.Repository, meta store.RoomMeta, wantReplayed int) (Row, error) {
	const runs = 7
	var times []time.Duration
	start := time.Now()
	for range runs {
		t0 := time.Now()
		rec, err := cell.Recover(ctx, repo, meta)
		if err != nil {
			return Row{}, err
		}
		times = append(times, time.Since(t0))
		if len(rec.Replayed) != wantReplayed {
			return Row{}, fmt.Errorf("recover replayed %d commands, want %d", len(rec.Replayed), wantReplayed)
		}
	}
	slices.Sort(times)
	return Row{Ops: wantReplayed, Elapsed: time.Since(start) / runs, P50: times[runs/2], P99: times[runs-1]}, nil
}

// Memory loads rooms idle rooms and reports the heap and stacks they hold.
func Memory(ctx context.Context, env Env, rooms int) (Row, error) {
	cfg := env.engineConfig()
	cfg.IdleTimeout = time.Hour
	return withEngine(ctx, env, cfg, func(reg *cell.Registry) (Row, error) {
		before := inUse()
		start := time.Now()
		if _, err := createRooms(ctx, reg, "mem", rooms); err != nil {
			return Row{}, err
		}
		elapsed := time.Since(start)
		if reg.Loaded() != rooms {
			return Row{}, fmt.Errorf("%d rooms loaded, want %d", reg.Loaded(), rooms)
		}
		used := inUse() - before
		perRoom := float64(used) / float64(rooms)
		return Row{
			Name: fmt.Sprintf("%d idle rooms loaded", rooms), Ops: rooms, Elapsed: elapsed,
			Extra: fmt.Sprintf("%.1f MiB, %.0f bytes/room; target <= 1 GiB for 50,000: %.2fx",
				float64(used)/(1<<20), perRoom, perRoom*50_000/(1<<30)),
		}, nil
	})
}

// inUse is the heap in use plus goroutine stacks, after a collection.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// withEngine runs f on a fresh repository and registry and closes both.
func withEngine(ctx context.Context, env Env, cfg cell.Config, f func(*cell.Registry) (Row, error)) (Row, error) {
	repo, err := env.Open(ctx)
	if err != nil {
		return Row{}, err
	}
	defer func() { _ = repo.Close() }()
	reg := newRegistry(repo, cfg)
	defer func() { _ = reg.Close(ctx) }()
	return f(reg)
}
