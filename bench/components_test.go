package bench

import (
	"math"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// cpuSamples is a CPU profile whose samples have the given stacks (leaf
// first) and CPU.
func cpuSamples(stacks [][]string, cpu []time.Duration) *profile.Profile {
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}}
	funcs := map[string]*profile.Function{}
	for i, stack := range stacks {
		s := &profile.Sample{Value: []int64{1, int64(cpu[i])}}
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
// and the fractions add up to one.
func TestComponentsSplitAProfileByTheGoroutinesThatSpentIt(t *testing.T) {
	ms := time.Millisecond
	p := cpuSamples([][]string{
		{"modernc.org/sqlite/lib._sqlite3VdbeExec", "hyapp/room-service/cell.(*committer).flush", "hyapp/room-service/cell.(*committer).work"},
		{"hyapp/room-service/outbox/relay.(*Relay).Committed", "hyapp/room-service/cell.(*Cell).run"},
		{"github.com/nats-io/nats%2ego.(*Conn).publish", "hyapp/room-service/outbox/natsbus.(*Bus).PublishInOrder", "hyapp/room-service/outbox/relay.(*Relay).worker"},
		{"encoding/json.Unmarshal", "hyapp/room-service/im/timlocal.(*Server).serveAPI", "net/http.(*conn).serve"},
		{"runtime.findRunnable", "runtime.schedule", "runtime.mcall"},
		{"hyapp/room-service/cell.(*Cell).run"},
	}, []time.Duration{40 * ms, 10 * ms, 20 * ms, 10 * ms, 10 * ms, 10 * ms})
	shares, err := Components(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name string
		cpu  time.Duration
	}{
		{"the group commit (the database writer)", 40 * ms},
		{"the room cells", 20 * ms},
		{"the outbox relay", 20 * ms},
		{"the local Tencent endpoint", 10 * ms},
		{otherComponent, 10 * ms},
	}
	if len(shares) != len(want) {
		t.Fatalf("shares %+v, want %+v", shares, want)
	}
	sum := 0.0
	for i, w := range want {
		if shares[i].Component != w.name || shares[i].CPU != w.cpu {
			t.Errorf("share %d: %s %v, want %s %v", i, shares[i].Component, shares[i].CPU, w.name, w.cpu)
		}
		sum += shares[i].Fraction
	}
	if math.Abs(sum-1) > 1e-9 || math.Abs(shares[0].Fraction-0.4) > 1e-9 {
		t.Errorf("fractions add up to %v and the commit's is %v, want 1 and 0.4", sum, shares[0].Fraction)
	}

	rows := componentRows("  CPU", shares, 200*time.Microsecond)
	if got, want := rows[0].Name+" | "+rows[0].Extra, "  CPU: the group commit (the database writer) | 40.0% of the service's CPU, 80 µs a call"; got != want {
		t.Errorf("row %q, want %q", got, want)
	}

	heap := &profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}
	if _, err := Components(heap); err == nil {
		t.Error("a heap profile was split as a CPU profile")
	}
}
