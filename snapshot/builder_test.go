package snapshot

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	"hyapp/room-service/room"
)

// TestBuilderEqualsToProto changes a room's members at random, many at a
// time and one at a time (joins, rejoins that change a member's fields,
// leaves), and the day's contributions the same way (new senders, new
// totals, a day's reset), and checks after each change that a Builder's
// message equals ToProto's, and that the messages it returned before are
// unchanged.
func TestBuilderEqualsToProto(t *testing.T) {
	// The room crosses builderKeeps both ways every 25 builds: built from
	// scratch below it, from the kept messages above.
	defer func(k int) { builderKeeps = k }(builderKeeps)
	rng := rand.New(rand.NewPCG(7, 11))
	s := room.Genesis("b", 1, 2, 8, "chat", room.StatusOpen)
	var b Builder
	type earlier struct {
		msg  proto.Message
		wire []byte
	}
	var before []earlier
	var keptBuilds, freshBuilds int
	for step := range 400 {
		changes := 1
		if step%50 == 0 {
			changes = 300 // a burst: many joins and leaves between two builds
		}
		builderKeeps = 200
		if step/25%2 == 1 {
			builderKeeps = 1 << 30 // the room is below it: built from scratch, nothing kept
		}
		for range changes {
			id := 1000 + rng.Int64N(600)
			switch m, ok := s.Members[id]; {
			case ok && rng.IntN(3) == 0:
				delete(s.Members, id)
			case ok:
				m.Nickname, m.Vehicle = fmt.Sprint("n", rng.IntN(4)), fmt.Sprint("v", rng.IntN(2)) // a rejoin
			default:
				s.Members[id] = &room.Member{UserID: id, JoinedAt: int64(step), Nickname: fmt.Sprint("n", step)}
			}
			sender := 5000 + rng.Int64N(600)
			s.Economy.Contrib[sender] += 1 + rng.Int64N(3) // a gift: a new sender or a new total
		}
		if step%100 == 99 {
			s.Economy.Contrib = map[int64]int64{} // a new business day
		}
		s.Version++
		kept := len(s.Members) >= builderKeeps
		got, want := b.ToProto(s), ToProto(s)
		if !proto.Equal(got, want) {
			t.Fatalf("step %d: the builder's message differs from ToProto's (%d members, builder %d)", step, len(want.GetMembers()), len(got.GetMembers()))
		}
		gotWire, err := Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if wantWire, _ := Encode(s); !bytes.Equal(gotWire, wantWire) {
			t.Fatalf("step %d: Marshal of the builder's message differs from Encode", step)
		}
		for i, e := range before {
			if w, _ := deterministic.Marshal(e.msg); !bytes.Equal(w, e.wire) {
				t.Fatalf("step %d: the message of build %d changed", step, i)
			}
		}
		if step%40 == 0 {
			before = append(before, earlier{got, gotWire})
		}
		if kept {
			keptBuilds++
		} else {
			freshBuilds++
			if len(b.ids) != 0 || len(b.msgs) != 0 {
				t.Fatalf("step %d: below builderKeeps the builder still holds %d members", step, len(b.ids))
			}
			if len(s.Economy.Contrib) < builderKeeps && (len(b.senders) != 0 || len(b.contrib) != 0) {
				t.Fatalf("step %d: below builderKeeps the builder still holds %d contributions", step, len(b.senders))
			}
		}
	}
	if keptBuilds < 50 || freshBuilds < 50 {
		t.Fatalf("%d builds from kept messages, %d from scratch: the walk did not cross builderKeeps enough", keptBuilds, freshBuilds)
	}
	if len(s.Members) < 100 {
		t.Fatalf("the room ended with %d members: the walk did not exercise a crowd", len(s.Members))
	}
}

// TestABuildAfterAGiftKeepsTheDaysContributions: in a room whose day has
// 20,000 senders, a build after a gift makes one new entry, not the whole
// list again (2.5 ms and 20,000 allocations per build: one per commit of a
// gift storm that a reader follows), and what it builds is ToProto's.
func TestABuildAfterAGiftKeepsTheDaysContributions(t *testing.T) {
	s := crowd(10)
	for u := int64(1); u <= 20_000; u++ {
		s.Economy.Contrib[u] = u
	}
	var b Builder
	b.ToProto(s)
	allocs := testing.AllocsPerRun(10, func() {
		s.Economy.Contrib[7]++
		b.ToProto(s)
	})
	if allocs > 1_000 {
		t.Fatalf("a build after a gift allocated %.0f times: the day's contributions were made again", allocs)
	}
	s.Economy.Contrib[30_000] = 1 // a new sender
	if got, want := b.ToProto(s), ToProto(s); !proto.Equal(got, want) {
		t.Fatal("the builder's contributions differ from ToProto's")
	}
}

// crowd is an open room of n members (user ids 1..n).
func crowd(n int) *room.State {
	s := room.Genesis("crowd", 1, 2, 8, "chat", room.StatusOpen)
	for u := int64(1); u <= int64(n); u++ {
		s.Members[u] = &room.Member{UserID: u, JoinedAt: u, Nickname: "n"}
	}
	return s
}

// TestABuildAfterAGiftReusesTheCrowd: in a room of 100,000 members, after
// a command that changes no member (a gift, a seat, the mic) a build
// (Reuse) takes the last build's list, not a walk of the crowd: a read
// after each commit of a gift storm would otherwise cost the room's
// goroutine 5 ms and 1.6 MB per commit. What it builds is ToProto's.
func TestABuildAfterAGiftReusesTheCrowd(t *testing.T) {
	s := crowd(100_000)
	var b Builder
	first := b.ToProto(s)
	if _, err := room.Apply(s, &room.Envelope{RoomID: "crowd", CommandID: "t", Operator: 1, At: 1_000, Command: &room.TakeMic{SeatIndex: 0}}); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 10 {
		mic := &room.Envelope{RoomID: "crowd", CommandID: fmt.Sprint("m", i), Operator: 1, At: 1_000, Command: &room.SetMyMic{On: i%2 == 1}}
		if _, err := room.Apply(s, mic); err != nil {
			t.Fatal(err)
		}
		b.Reuse(s)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("10 builds after commands that changed no member allocated %d bytes: the crowd's list was made again", got)
	}
	if got, want := b.Reuse(s), ToProto(s); !proto.Equal(got, want) || len(first.GetMembers()) != len(got.GetMembers()) {
		t.Fatal("the reused list differs from ToProto's")
	}
	// Another State (the room reloaded) is built, not taken from the last.
	other := crowd(100_000)
	delete(other.Members, 7)
	other.Members[200_000] = &room.Member{UserID: 200_000, Nickname: "new"}
	if got, want := b.Reuse(other), ToProto(other); !proto.Equal(got, want) {
		t.Fatal("Reuse of another State took the last build's members")
	}
}
