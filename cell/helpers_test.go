package cell_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"hyapp/room-service/cell"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// stores runs f once per storage implementation: SQLite, and MySQL on the
// local MariaDB (skipped where there is none, unless CI is set).
func stores(t *testing.T, f func(t *testing.T, open func(testing.TB) store.Repository)) {
	t.Run("sqlite", func(t *testing.T) { f(t, func(tb testing.TB) store.Repository { return openRepo(tb) }) })
	t.Run("mysql", func(t *testing.T) {
		dsn := mysqltest.DSN(t)
		f(t, func(tb testing.TB) store.Repository {
			db, err := mysql.Open(context.Background(), dsn, mysql.Options{})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = db.Close() })
			return db
		})
	})
}

func openRepo(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "room.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// recordSink keeps every committed batch.
type recordSink struct {
	mu    sync.Mutex
	got   []room.Committed
	panic string // a command id that makes Publish panic
}

func (s *recordSink) Publish(b []room.Committed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range b {
		if s.panic != "" && c.CommandID == s.panic {
			panic("sink refuses " + c.CommandID)
		}
	}
	s.got = append(s.got, b...)
}

func (s *recordSink) all() []room.Committed {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]room.Committed(nil), s.got...)
}

func newRegistry(t testing.TB, repo store.Repository, cfg cell.Config, sink cell.EventSink) *cell.Registry {
	t.Helper()
	return newRegistryWith(t, repo, cfg, sink, nil)
}

// newRegistryWith is newRegistry counting into m (nil: metrics of its own).
func newRegistryWith(t testing.TB, repo store.Repository, cfg cell.Config, sink cell.EventSink, m *cell.Metrics) *cell.Registry {
	t.Helper()
	if sink == nil {
		sink = &recordSink{}
	}
	reg := cell.New(cfg, repo, lease.NewLocal(), sink, m, quiet)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Errorf("close registry: %v", err)
		}
	})
	return reg
}

func env(roomID, commandID string, op int64, cmd room.Command) *room.Envelope {
	return &room.Envelope{RoomID: roomID, CommandID: commandID, Operator: op, Command: cmd}
}

func mustSubmit(t testing.TB, reg *cell.Registry, e *room.Envelope) cell.Result {
	t.Helper()
	res, err := reg.Submit(context.Background(), e)
	if err != nil {
		t.Fatalf("%s %s: %v", e.Command.Type(), e.CommandID, err)
	}
	return res
}

// createRoom makes an open room owned by user 1 with 10 seats.
func createRoom(t testing.TB, reg *cell.Registry, roomID string) {
	t.Helper()
	mustSubmit(t, reg, env(roomID, "create", 1, &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "t"}))
}

// randomCommand makes a command that is valid in shape and often refused by
// the room's rules: a mix that exercises every path of the state machine.
func randomCommand(rng *rand.Rand) (int64, room.Command) {
	user := func() int64 { return 1 + rng.Int64N(8) }
	seat := func() int32 { return rng.Int32N(11) } // 10 is out of range for a 10-seat room
	secs := func() int64 { return rng.Int64N(3) * 60 }
	op := user()
	if rng.IntN(10) == 0 {
		op = 1 // the owner, so admin commands sometimes pass
	}
	title := fmt.Sprintf("t%d", rng.IntN(100))
	cmds := []func() room.Command{
		func() room.Command { return &room.JoinRoom{Nickname: fmt.Sprintf("u%d", op), Vehicle: "car"} },
		func() room.Command { return &room.JoinRoom{} },
		func() room.Command { return &room.LeaveRoom{} },
		func() room.Command { return &room.TakeMic{SeatIndex: seat()} },
		func() room.Command { return &room.TakeMic{SeatIndex: seat()} },
		func() room.Command { return &room.LeaveMic{} },
		func() room.Command { return &room.MoveMic{ToSeatIndex: seat()} },
		func() room.Command { return &room.KickFromMic{TargetUserID: user()} },
		func() room.Command { return &room.LockMicSeat{SeatIndex: seat(), Locked: rng.IntN(2) == 0} },
		func() room.Command { return &room.MuteMicSeat{SeatIndex: seat(), Muted: rng.IntN(2) == 0} },
		func() room.Command { return &room.SetMyMic{On: rng.IntN(2) == 0} },
		func() room.Command { return &room.KickUser{TargetUserID: user(), DurationSeconds: secs()} },
		func() room.Command { return &room.MuteUser{TargetUserID: user(), DurationSeconds: secs()} },
		func() room.Command { return &room.UnbanUser{TargetUserID: user()} },
		func() room.Command { return &room.SetAdmin{TargetUserID: user(), Admin: rng.IntN(2) == 0} },
		func() room.Command { return &room.UpdateProfile{Title: &title} },
		func() room.Command { return &room.ChangeBackground{BackgroundURL: title} },
		func() room.Command { return &room.SetChatEnabled{Enabled: rng.IntN(2) == 0} },
		func() room.Command { return &room.SetMicApproval{Required: rng.IntN(3) > 0} },
		func() room.Command { return &room.RequestMic{SeatIndex: seat() - 1} },
		func() room.Command { return &room.ApproveMicRequest{TargetUserID: user()} },
		func() room.Command { return &room.InviteToMic{TargetUserID: user(), SeatIndex: seat() - 1} },
		func() room.Command { return &room.AcceptMicInvite{} },
		func() room.Command { return &room.SetHost{HostUserID: user()} },
	}
	if rng.IntN(400) == 0 {
		return 1, &room.CloseRoom{}
	}
	return op, cmds[rng.IntN(len(cmds))]()
}
