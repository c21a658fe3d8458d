package cell_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
)

// redisLease is a node's lease on the Redis at addr, renewed until the test ends.
func redisLease(t *testing.T, addr, id string, keys redislease.Keys, ttl time.Duration) *redislease.Lease {
	t.Helper()
	opt, err := redislease.ClientOptions("redis://"+addr+"/0", ttl)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	l, err := redislease.New(c, redislease.Config{Self: redislease.Node{ID: id, Addr: id + ":1"}, TTL: ttl, Keys: keys},
		slog.New(slog.DiscardHandler), redislease.Metrics{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = c.Close() })
	return l
}

// TestAnOwnerCutOffFromRedisDoesNotAnswerFromAStaleState: node a holds a
// room and loses Redis, not the database. Its lease runs out and cannot be
// renewed; node b takes the room and changes it. a's commits would be
// fenced, and its reads and refusals are not answered from what it had
// either: a heartbeat finds b's owner epoch and sends the caller on
// (room_moved), a gives the room up, and a read or a command for it is
// told to retry.
func TestAnOwnerCutOffFromRedisDoesNotAnswerFromAStaleState(t *testing.T) {
	addr := servicetest.RedisAddr(t)
	dsn := mysqltest.DSN(t)
	open := func() *mysql.DB {
		db, err := mysql.Open(context.Background(), dsn, mysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	const ttl = 300 * time.Millisecond
	keys := redislease.Keys{Prefix: "partition:" + t.Name() + time.Now().Format("150405.000000") + ":"}
	proxy := mysqltest.NewProxy(t, addr)
	la := redisLease(t, proxy.Addr(), "a", keys, ttl)
	lb := redisLease(t, addr, "b", keys, ttl)
	cfgA, cfgB := cell.DefaultConfig(), cell.DefaultConfig()
	cfgA.NodeID, cfgB.NodeID = "a", "b"
	cfgA.TimerScanEvery, cfgB.TimerScanEvery = -1, -1
	regA := cell.New(cfgA, open(), la, &recordSink{}, nil, quiet)
	regB := cell.New(cfgB, open(), lb, &recordSink{}, nil, quiet)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, reg := range []*cell.Registry{regB, regA} {
			if err := reg.Close(ctx); err != nil {
				t.Errorf("close registry: %v", err)
			}
		}
	})

	const r = "partitioned"
	createRoom(t, regA, r)
	mustSubmit(t, regA, env(r, "join7", 7, &room.JoinRoom{}))

	proxy.Cut()
	// b takes the room once a's key has expired.
	poll.Until(t, 10*time.Second, "b took the room", func() error {
		_, err := regB.Submit(context.Background(), env(r, "join9", 9, &room.JoinRoom{}))
		return err
	})
	head, err := regB.Snapshot(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}

	// A heartbeat does not wait in the mailbox, and would count user 9 as
	// no member.
	if res, err := regA.Heartbeat(context.Background(), r, []int64{7, 9}); !errors.Is(err, room.ErrFenced) {
		t.Fatalf("a's heartbeat: %+v, %v; want room_moved", res, err)
	}
	if snap, err := regA.Snapshot(context.Background(), r); err == nil || room.AsError(err).Code != room.CodeUnavailable {
		t.Fatalf("a's read: version %d (b's head is %d), %v; want unavailable, to retry", snap.GetRoomVersion(), head.GetRoomVersion(), err)
	}
	// User 9 is in the room at b: a must not refuse their mic as
	// not_in_room. It gave the room up, and cannot take it again without
	// Redis: the caller is told to retry.
	if _, err := regA.Submit(context.Background(), env(r, "mic9", 9, &room.TakeMic{SeatIndex: 1})); err == nil || room.AsError(err).Code != room.CodeUnavailable {
		t.Fatalf("a's answer to a member of the room at b: %v; want unavailable, to retry", err)
	}
	if _, err := regB.Submit(context.Background(), env(r, "mic9", 9, &room.TakeMic{SeatIndex: 1})); err != nil {
		t.Fatalf("b's TakeMic: %v", err)
	}
}

// TestABusyCellThatLostItsLeaseDoesNotAnswerReads: a room's cell is in a
// commit when its lease's renewal finds another node holding the key (a
// Redis failover lost it and that node took the room). A read that does
// not wait in the mailbox must not be answered from the cell's state: the
// room is known to be another node's.
func TestABusyCellThatLostItsLeaseDoesNotAnswerReads(t *testing.T) {
	addr := servicetest.RedisAddr(t)
	const ttl = 3 * time.Second
	keys := redislease.Keys{Prefix: "leaselost:" + t.Name() + time.Now().Format("150405.000000") + ":"}
	repo := openRepo(t)
	setup := newRegistry(t, repo, cell.Config{}, nil)
	const r = "busy"
	createRoom(t, setup, r)
	if err := setup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	blocked := &blockingRepo{Repository: repo, entered: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(blocked.release) })
	defer release() // a failed test must not leave the commit held
	la := redisLease(t, addr, "a", keys, ttl)
	cfg := cell.DefaultConfig()
	cfg.NodeID, cfg.TimerScanEvery = "a", -1
	reg := cell.New(cfg, blocked, la, &recordSink{}, nil, quiet)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Errorf("close registry: %v", err)
		}
	})
	if _, err := reg.Snapshot(context.Background(), r); err != nil { // loads the room and builds its view
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = reg.Submit(context.Background(), env(r, "bg", 1, &room.ChangeBackground{BackgroundURL: "x"}))
	}()
	<-blocked.entered // the cell is now in its commit

	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Set(context.Background(), keys.Lease(r), "b|b:1|x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a's renewal finding b's key", poll.Bool(func() bool { return la.Held() == 0 }))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if snap, err := reg.Snapshot(ctx, r); err == nil {
		t.Errorf("a read of a room whose lease is lost answered version %d from the cell's state", snap.GetRoomVersion())
	}
	release()
	<-done
}

// stuckStops holds every StopRooms call until its context ends, as a
// database too slow for a node's shutdown.
type stuckStops struct{ store.Repository }

func (s stuckStops) StopRooms(ctx context.Context, _ []store.RoomStop) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestADrainPastItsDeadlineStillReleasesTheLeases: the final snapshots of a
// drain outlast its deadline and are abandoned. The rooms' leases are
// released all the same, so their next owners take them at once instead of
// a lease TTL later.
func TestADrainPastItsDeadlineStillReleasesTheLeases(t *testing.T) {
	addr := servicetest.RedisAddr(t)
	keys := redislease.Keys{Prefix: "drain:" + t.Name() + time.Now().Format("150405.000000") + ":"}
	la := redisLease(t, addr, "a", keys, 3*time.Second)
	cfg := cell.DefaultConfig()
	cfg.NodeID, cfg.TimerScanEvery = "a", -1
	reg := cell.New(cfg, stuckStops{openRepo(t)}, la, &recordSink{}, nil, quiet)
	const r = "handed-off"
	createRoom(t, reg, r)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := reg.Drain(ctx); err == nil {
		t.Fatal("the drain met its deadline: the test needs it to run out")
	}
	owner, found, err := la.Owner(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if found {
		t.Fatalf("after the drain the room's lease is held by %q, want it released", owner.NodeID)
	}
}
