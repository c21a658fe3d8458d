package snapshot

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"hyapp/room-service/room"
)

// TestBuilderEqualsToProto changes a room's members at random, many at a
// time and one at a time (joins, rejoins that change a member's fields,
// leaves), and checks after each change that a Builder's message equals
// ToProto's, and that the messages it returned before are unchanged.
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
		}
	}
	if keptBuilds < 50 || freshBuilds < 50 {
		t.Fatalf("%d builds from kept messages, %d from scratch: the walk did not cross builderKeeps enough", keptBuilds, freshBuilds)
	}
	if len(s.Members) < 100 {
		t.Fatalf("the room ended with %d members: the walk did not exercise a crowd", len(s.Members))
	}
}
