package bench

import (
	"math"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// sampled is a profile of the sample types whose samples have the given
// stacks (leaf first) and values.
func sampled(types []*profile.ValueType, stacks [][]string, values [][]int64) *profile.Profile {
	p := &profile.Profile{SampleType: types, PeriodType: types[len(types)-1]}
	funcs := map[string]*profile.Function{}
	for i, stack := range stacks {
		s := &profile.Sample{Value: values[i]}
		for _, name := range stack {
			f := funcs[name]
			if f == nil {
				f = &profile.Function{ID: uint64(len(funcs) + 1), Name: name}
				funcs[name] = f
				p.Function = append(p.Function, f)
			}
			loc := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
			p.Location = append(p.Location, loc)
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

// TestComponentsSplitAProfileByTheGoroutinesThatSpentIt: a sample is its
// stack's first component in order (a cell handing rows to the relay is
// the cell's; the relay's publishes through the NATS client are the
// relay's; the local IM endpoint is not net/http's), the rest is the rest,
// and each kind's fractions add up to one; allocations are split the
// same way, between two heap profiles.
func TestComponentsSplitAProfileByTheGoroutinesThatSpentIt(t *testing.T) {
	ms := int64(time.Millisecond)
	stacks := [][]string{
		{"modernc.org/sqlite/lib._sqlite3VdbeExec", "hyapp/room-service/cell.(*committer).flush", "hyapp/room-service/cell.(*committer).work"},
		{"hyapp/room-service/outbox/relay.(*Relay).Committed", "hyapp/room-service/cell.(*Cell).run"},
		{"github.com/nats-io/nats%2ego.(*Conn).publish", "hyapp/room-service/outbox/natsbus.(*Bus).PublishInOrder", "hyapp/room-service/outbox/relay.(*Relay).worker"},
		{"encoding/json.Unmarshal", "hyapp/room-service/im/timlocal.(*Server).serveAPI", "net/http.(*conn).serve"},
		{"runtime.findRunnable", "runtime.schedule", "runtime.mcall"},
		{"hyapp/room-service/cell.(*Cell).run"},
	}
	cpu := sampled([]*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}, stacks,
		[][]int64{{1, 40 * ms}, {1, 10 * ms}, {1, 20 * ms}, {1, 10 * ms}, {1, 10 * ms}, {1, 10 * ms}})
	heapTypes := func() []*profile.ValueType {
		return []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"}}
	}
	// Before the row: allocations of the commit and the cells; after it,
	// more of both and the relay's: the row's are the difference.
	before := sampled(heapTypes(), stacks[:2], [][]int64{{100, 1000}, {50, 500}})
	after := sampled(heapTypes(), stacks[:3], [][]int64{{130, 1300}, {110, 1100}, {10, 600}})
	allocs, err := allocsBetween(before, after)
	if err != nil {
		t.Fatal(err)
	}
	shares, err := Components(cpu, allocs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Share{
		{"the group commit (the database writer)", 0.4, 0.3, 0.2},
		{"the room cells", 0.2, 0.6, 0.4},
		{"the outbox relay", 0.2, 0.1, 0.4},
		{"the local Tencent endpoint", 0.1, 0, 0},
		{otherComponent, 0.1, 0, 0},
	}
	if len(shares) != len(want) {
		t.Fatalf("shares %+v, want %+v", shares, want)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for i, w := range want {
		if g := shares[i]; g.Component != w.Component || !near(g.CPU, w.CPU) || !near(g.Allocs, w.Allocs) || !near(g.Bytes, w.Bytes) {
			t.Errorf("share %d: %+v, want %+v", i, g, w)
		}
	}
	if _, err := allocsBetween(before, cpu); err == nil {
		t.Error("a CPU profile was taken from a heap profile")
	}

	rows := componentRows("  CPU", shares, perCall{cpu: 200 * time.Microsecond, allocs: 100, bytes: 10240})
	if got, want := rows[0].Name+" | "+rows[0].Extra,
		"  CPU: the group commit (the database writer) | 40.0% of the service's CPU, 80 µs a call; 30.0% of its allocations, 30 a call (2.0 KB)"; got != want {
		t.Errorf("row %q, want %q", got, want)
	}
	if got, want := componentRows("  CPU", shares[3:4], perCall{})[0].Extra, "10.0% of the service's CPU"; got != want {
		t.Errorf("row without costs %q, want %q", got, want)
	}

	if _, err := Components(before, nil); err == nil {
		t.Error("a heap profile was split as a CPU profile")
	}
	if _, err := Components(cpu, cpu); err == nil {
		t.Error("a CPU profile was split as allocations")
	}
}
