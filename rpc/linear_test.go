package rpc_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/anishathalye/porcupine"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/rpc"
)

// The seat model: a room of linSeats seats, with the users linUsers
// members of it, under TakeMic, LeaveMic, MoveMic and snapshot reads.
const (
	linSeats   = 4
	linUsers   = 6
	linFirst   = 2 // the first user id; user 1 owns the room and stays off the seats
	linOps     = 40
	linMoves   = 5 // failovers the test causes
	linMinMove = 3 // moves the room must make
)

// seatState is the seat row: the user on each seat, 0 for none. An array,
// so states compare with ==.
type seatState [linSeats]int64

func (s seatState) of(user int64) int {
	for i, u := range s {
		if u == user {
			return i
		}
	}
	return -1
}

type seatOp int

const (
	opTake seatOp = iota
	opLeave
	opMove
	opRead
)

func (o seatOp) String() string {
	return [...]string{"take", "leave", "move", "read"}[o]
}

type seatIn struct {
	op   seatOp
	user int64
	seat int32
}

// seatOut is an answer: ok (reason ""), a refusal's reason, the seats a
// read saw, or unknown: the call was never answered.
type seatOut struct {
	unknown bool
	reason  string
	seats   seatState
}

// seatStep applies the room's rules (room/apply.go) for the seat commands
// to s: the reason a command is refused ("" if it applies) and the state
// after it.
func seatStep(s seatState, in seatIn) (string, seatState) {
	from := s.of(in.user)
	switch in.op {
	case opTake:
		switch {
		case from >= 0:
			return "already_on_mic", s
		case s[in.seat] != 0:
			return "seat_occupied", s
		}
		s[in.seat] = in.user
	case opLeave:
		if from < 0 {
			return "not_on_mic", s
		}
		s[from] = 0
	case opMove:
		switch {
		case from < 0:
			return "not_on_mic", s
		case from == int(in.seat):
			return "already_on_mic", s
		case s[in.seat] != 0:
			return "seat_occupied", s
		}
		s[from], s[in.seat] = 0, in.user
	}
	return "", s
}

var seatModel = porcupine.Model{
	Init: func() any { return seatState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(seatState), input.(seatIn), output.(seatOut)
		if in.op == opRead {
			return out.unknown || out.seats == s, s
		}
		reason, next := seatStep(s, in)
		if out.unknown {
			// Applied if the rules let it; linearized after every other
			// operation, it stands for a command that never applied.
			return true, next
		}
		return out.reason == reason, next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(seatIn), output.(seatOut)
		var call string
		switch in.op {
		case opTake, opMove:
			call = fmt.Sprintf("%v(u%d, seat %d)", in.op, in.user, in.seat)
		default:
			call = fmt.Sprintf("%v(u%d)", in.op, in.user)
		}
		switch {
		case out.unknown:
			return call + " -> ?"
		case in.op == opRead:
			return fmt.Sprintf("%s -> %v", call, out.seats)
		case out.reason == "":
			return call + " -> ok"
		}
		return call + " -> " + out.reason
	},
	DescribeState: func(state any) string { return fmt.Sprint(state.(seatState)) },
}

// linFleet is three node slots of a fleet; a failover replaces the node in
// the slot of the room's owner with a fresh one.
type linFleet struct {
	f     *fleet
	mu    sync.Mutex
	slots []*node
	n     int // nodes started
}

func (lf *linFleet) pick(r *rand.Rand) *node {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.slots[r.IntN(len(lf.slots))]
}

// failover stops the node holding r1 and starts a fresh node in its slot;
// closeFirst closes its registry before stopping its server (calls that
// reach it meet shutting_down), else its server stops first (until its
// registry has closed too, the room is held by a node nobody can reach, and
// calls fail and are tried again). It returns the stopped node's id.
func (lf *linFleet) failover(t *testing.T, closeFirst bool) string {
	t.Helper()
	holder := lf.f.holder("r1")
	lf.mu.Lock()
	lf.n++
	id := fmt.Sprint("n", lf.n)
	k := -1
	for i, n := range lf.slots {
		if n.id == holder {
			k = i
		}
	}
	lf.mu.Unlock()
	if k < 0 {
		t.Fatalf("r1 is held by %q, which is in no slot", holder)
	}
	fresh := lf.f.start(t, id, nil)
	lf.mu.Lock()
	old := lf.slots[k]
	lf.slots[k] = fresh
	lf.mu.Unlock()
	if closeFirst {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := old.reg.Close(ctx); err != nil {
			t.Errorf("%s: registry close: %v", old.id, err)
		}
	}
	old.shutdown()
	return old.id
}

// retryable reports whether a call's error may be followed by the same
// call: the room was moving, the node was gone, or the router gave up.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	if connect.CodeOf(err) == connect.CodeUnavailable {
		return true
	}
	// Not an answer of the service: the node's server stopped.
	var ce *connect.Error
	return !errors.As(err, &ce) || !connect.IsWireError(ce)
}

// linMeta is an operation's command id, the tries it took and what the
// failed tries answered.
type linMeta struct {
	commandID string
	tries     int
	err       error // the last try's error, if any
	trail     []string
}

func (m linMeta) String() string {
	if m.tries == 1 {
		return m.commandID
	}
	return fmt.Sprintf("%s (%d tries)", m.commandID, m.tries)
}

// linPatience bounds how long one operation is tried again; each try goes
// through a node picked at random, and the router's backoff paces them.
const linPatience = 30 * time.Second

// linCall runs one operation with its command id through random nodes until
// it is answered, and returns it for the history. Answers that are neither
// a success nor a refusal of the seat rules go to bad.
func linCall(lf *linFleet, r *rand.Rand, client int, in seatIn, commandID string, bad func(string, ...any)) porcupine.Operation {
	call := time.Now().UnixNano()
	var out seatOut
	var err error
	tries := 0
	var trail []string
	for tries == 0 || time.Since(time.Unix(0, call)) < linPatience {
		tries++
		n := lf.pick(r)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		switch in.op {
		case opTake:
			_, err = n.rooms.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: "r1", CommandId: commandID, OperatorUserId: in.user, SeatIndex: in.seat}))
		case opLeave:
			_, err = n.rooms.LeaveMic(ctx, connect.NewRequest(&roomv1.LeaveMicRequest{RoomId: "r1", CommandId: commandID, OperatorUserId: in.user}))
		case opMove:
			_, err = n.rooms.MoveMic(ctx, connect.NewRequest(&roomv1.MoveMicRequest{RoomId: "r1", CommandId: commandID, OperatorUserId: in.user, ToSeatIndex: in.seat}))
		case opRead:
			var res *connect.Response[roomv1.GetRoomSnapshotResponse]
			res, err = n.rooms.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "r1"}))
			if err == nil {
				seats := res.Msg.GetSnapshot().GetSeats()
				if len(seats) != linSeats {
					bad("%s: %d seats", commandID, len(seats))
				}
				for i := 0; i < len(seats) && i < linSeats; i++ {
					out.seats[i] = seats[i].GetUserId()
				}
			}
		}
		cancel()
		if err != nil {
			trail = append(trail, fmt.Sprintf("%v %s: %v", time.Since(time.Unix(0, call)), n.id, err))
		}
		if err == nil || !retryable(err) {
			break
		}
	}
	ret := time.Now().UnixNano()
	switch reason := rpc.Reason(err); {
	case err == nil:
	case retryable(err):
		out.unknown, ret = true, math.MaxInt64
	case connect.CodeOf(err) == connect.CodeFailedPrecondition && reason != "":
		out.reason = reason
	default:
		bad("%s: %v(u%d, seat %d): %v (code %v, reason %q)", commandID, in.op, in.user, in.seat, err, connect.CodeOf(err), reason)
		out.reason = reason
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret, Metadata: linMeta{commandID, tries, err, trail}}
}

// TestSeatHistoryAcrossFailoversIsLinearizable runs users taking, leaving
// and moving seats and reading the seat row through random nodes while the
// room's owner is stopped again and again, and checks that the history is
// linearizable under the room's seat rules.
func TestSeatHistoryAcrossFailoversIsLinearizable(t *testing.T) {
	f := newFleet(t)
	lf := &linFleet{f: f, slots: []*node{f.start(t, "a", nil), f.start(t, "b", nil), f.start(t, "c", nil)}}
	must(t, lf.slots[0].rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: linSeats})
	for u := int64(linFirst); u < linFirst+linUsers; u++ {
		must(t, lf.slots[u%3].rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("join-", u), OperatorUserId: u})
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		faults  []string
	)
	bad := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		faults = append(faults, fmt.Sprintf(format, args...))
	}
	record := func(op porcupine.Operation) {
		mu.Lock()
		defer mu.Unlock()
		history = append(history, op)
	}

	var done atomic.Int64 // operations the users finished
	var wg sync.WaitGroup
	for c := range linUsers {
		user := int64(linFirst + c)
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(c)))
			for i := range linOps {
				in := seatIn{user: user, seat: r.Int32N(linSeats)}
				switch p := r.IntN(100); {
				case p < 35:
					in.op = opTake
				case p < 55:
					in.op = opLeave
				case p < 80:
					in.op = opMove
				default:
					in.op = opRead
				}
				record(linCall(lf, r, c, in, fmt.Sprintf("u%d-%d", user, i), bad))
				done.Add(1)
			}
		})
	}
	// On a failure, let the users finish before the nodes stop.
	t.Cleanup(wg.Wait)

	// Failovers, spread over the history. After each one a read through a
	// random node, itself part of the history, makes some node claim the
	// room if no user's call did yet.
	moves := 0
	r := rand.New(rand.NewPCG(uint64(seed), linUsers))
	const total = linUsers * linOps
	for i := range linMoves {
		poll.Until(t, time.Minute, fmt.Sprintf("%d operations done", (i+1)*total/(linMoves+1)), poll.Bool(func() bool {
			return done.Load() >= int64((i+1)*total/(linMoves+1)) && f.holder("r1") != ""
		}))
		old := lf.failover(t, i%2 == 0)
		record(linCall(lf, r, linUsers, seatIn{op: opRead}, fmt.Sprint("failover-read-", i), bad))
		poll.Until(t, time.Minute, "r1 held by a new node", poll.Bool(func() bool {
			h := f.holder("r1")
			return h != "" && h != old
		}))
		moves++
		t.Logf("failover %d: %s stopped (registry first: %v), r1 now on %s", i, old, i%2 == 0, f.holder("r1"))
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, fault := range faults {
		t.Error(fault)
	}
	if moves < linMinMove {
		t.Errorf("the room moved %d times, want at least %d", moves, linMinMove)
	}
	unknown, retried := 0, 0
	counts := map[string]int{}
	for _, op := range history {
		out := op.Output.(seatOut)
		if op.Metadata.(linMeta).tries > 1 {
			retried++
		}
		if out.unknown || op.Metadata.(linMeta).tries > 3 {
			t.Logf("%v answered after %v: %v\n%s", op.Metadata, time.Duration(op.Return-op.Call), op.Metadata.(linMeta).err, strings.Join(op.Metadata.(linMeta).trail, "\n"))
		}
		switch {
		case out.unknown:
			unknown++
			counts["unknown"]++
		case op.Input.(seatIn).op == opRead:
			counts["read"]++
		case out.reason == "":
			counts["ok"]++
		default:
			counts[out.reason]++
		}
	}
	t.Logf("%d operations (%d tried again with their command id), %d moves: %v", len(history), retried, moves, counts)
	if counts["ok"] == 0 {
		t.Errorf("no seat command applied: %v", counts)
	}

	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(seatModel, history, time.Minute)
	t.Logf("checked in %v: %v", time.Since(start), res)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "seats.html")
		if err := porcupine.VisualizePath(seatModel, info, path); err != nil {
			t.Errorf("visualize: %v", err)
		}
		slices.SortFunc(history, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var ops []string
		for _, op := range history {
			ops = append(ops, fmt.Sprintf("%v %s", op.Metadata, seatModel.DescribeOperation(op.Input, op.Output)))
		}
		t.Fatalf("the history is %v (not linearizable); visualization at %s; unknown outcomes %d; operations:\n%s", res, path, unknown, strings.Join(ops, "\n"))
	}
}
