package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// component is a part of the service, known by the functions its
// goroutines run: a sample belongs to the first component any of whose
// patterns is in the name of any function on its stack.
type component struct {
	name     string
	patterns []string
}

// components are the service's parts, in the order a sample is matched:
// a cell that hands rows to the relay is the cell's, the relay's calls of
// the NATS client are the relay's.
var components = []component{
	{"the group commit (the database writer)", []string{"hyapp/room-service/cell.(*committer).work"}},
	{"the room cells", []string{"hyapp/room-service/cell.(*Cell).run"}},
	{"gRPC calls: the bridge, Connect, the interceptors, the handlers", []string{"hyapp/room-service/rpc.(*grpcBridge).serve"}},
	{"gRPC connections (grpc-go's readers and writers)", []string{"google.golang.org/grpc"}},
	{"the outbox relay", []string{"hyapp/room-service/outbox/relay."}},
	{"the NATS client", []string{"hyapp/room-service/outbox/natsbus.", "github.com/nats-io/nats%2ego.", "github.com/nats-io/nats.go."}},
	{"the embedded NATS server", []string{"github.com/nats-io/nats-server/"}},
	{"the IM lane and its Tencent client", []string{"hyapp/room-service/im.", "hyapp/room-service/im/tencent."}},
	{"the local Tencent endpoint", []string{"hyapp/room-service/im/timlocal."}},
	{"net/http (the IM calls' connections, /metrics)", []string{"net/http."}},
	{"the collector's workers", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}},
}

// otherComponent holds the samples of no component: the scheduler, system
// calls outside any of them, everything else.
const otherComponent = "the rest (the scheduler, others)"

// Share is a component's part of the service's CPU and of its heap
// allocations, as fractions (0 to 1) of each.
type Share struct {
	Component          string
	CPU, Allocs, Bytes float64
}

// Components splits the samples of a CPU profile and, when allocs is not
// nil, of a profile of the heap allocations made meanwhile (alloc_objects
// and alloc_space: see allocsBetween) between the service's components, in
// the order of components, the rest last; a component with neither CPU nor
// allocations is left out. Each kind's fractions add up to 1 unless the
// profile holds none of it.
func Components(cpu, allocs *profile.Profile) ([]Share, error) {
	c, err := split(cpu, "cpu", "nanoseconds")
	if err != nil {
		return nil, fmt.Errorf("not a CPU profile: %w", err)
	}
	var objects, bytes []float64
	if allocs != nil {
		if objects, err = split(allocs, "alloc_objects", "count"); err != nil {
			return nil, fmt.Errorf("not a heap profile: %w", err)
		}
		if bytes, err = split(allocs, "alloc_space", "bytes"); err != nil {
			return nil, fmt.Errorf("not a heap profile: %w", err)
		}
	}
	at := func(f []float64, i int) float64 {
		if f == nil {
			return 0
		}
		return f[i]
	}
	var shares []Share
	for i := range c {
		sh := Share{Component: otherComponent, CPU: c[i], Allocs: at(objects, i), Bytes: at(bytes, i)}
		if sh.CPU == 0 && sh.Allocs == 0 && sh.Bytes == 0 {
			continue
		}
		if i < len(components) {
			sh.Component = components[i].name
		}
		shares = append(shares, sh)
	}
	return shares, nil
}

// split is the fraction of p's values of the sample type typ/unit that
// each component holds, indexed as components, the rest last.
func split(p *profile.Profile, typ, unit string) ([]float64, error) {
	at := -1
	for i, st := range p.SampleType {
		if st.Type == typ && st.Unit == unit {
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("no %s/%s sample type", typ, unit)
	}
	parts := make([]float64, len(components)+1)
	total := 0.0
	for _, s := range p.Sample {
		v := float64(s.Value[at])
		parts[componentOf(s)] += v
		total += v
	}
	if total > 0 {
		for i := range parts {
			parts[i] /= total
		}
	}
	return parts, nil
}

// componentOf is the index in components of the sample's component, or
// len(components) for the rest.
func componentOf(s *profile.Sample) int {
	for i, c := range components {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				for _, pat := range c.patterns {
					if strings.Contains(line.Function.Name, pat) {
						return i
					}
				}
			}
		}
	}
	return len(components)
}

// cpuProfile is a CPU profile of the service being taken from its admin
// listener.
type cpuProfile struct {
	done chan struct{}
	p    *profile.Profile
	err  error
}

// startProfile starts taking a CPU profile of d from the service whose
// admin listener is at admin (its base URL, which serves /debug/pprof/).
func startProfile(ctx context.Context, admin string, d time.Duration) *cpuProfile {
	cp := &cpuProfile{done: make(chan struct{})}
	go func() {
		defer close(cp.done)
		cp.p, cp.err = fetchProfile(ctx, admin, d)
	}()
	return cp
}

// wait returns the profile once taken.
func (cp *cpuProfile) wait() (*profile.Profile, error) {
	<-cp.done
	return cp.p, cp.err
}

func fetchProfile(ctx context.Context, admin string, d time.Duration) (*profile.Profile, error) {
	return getProfile(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(admin, "/"), max(1, int(d.Seconds()))))
}

// heapAllocs is the service's profile of its heap allocations so far
// (alloc_objects and alloc_space), after a collection: a profile counts
// only what collections published, and only the heap profile's handler
// runs one first (gc=1).
func heapAllocs(ctx context.Context, admin string) (*profile.Profile, error) {
	return getProfile(ctx, strings.TrimSuffix(admin, "/")+"/debug/pprof/heap?gc=1")
}

// allocsBetween is the allocations of after less those of before: what
// the service allocated between the two.
func allocsBetween(before, after *profile.Profile) (*profile.Profile, error) {
	before = before.Copy()
	before.Scale(-1)
	return profile.Merge([]*profile.Profile{before, after})
}

func getProfile(ctx context.Context, url string) (*profile.Profile, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("profile the service: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return nil, fmt.Errorf("profile the service: %s: %s", res.Status, strings.TrimSpace(string(body)))
	}
	p, err := profile.Parse(res.Body)
	if err != nil {
		return nil, fmt.Errorf("profile the service: %w", err)
	}
	return p, nil
}

// perCall is what a row's calls cost the service each: CPU, heap
// allocations and their bytes (zero: not known).
type perCall struct {
	cpu           time.Duration
	allocs, bytes float64
}

// componentRows are the rows of a profile's shares: each component's part
// of the service's CPU and allocations and, from the row's measured cost
// a call, its part of that.
func componentRows(of string, shares []Share, each perCall) []Row {
	rows := make([]Row, 0, len(shares))
	for _, s := range shares {
		extra := fmt.Sprintf("%.1f%% of the service's CPU", 100*s.CPU)
		if each.cpu > 0 {
			extra += fmt.Sprintf(", %.0f µs a call", s.CPU*float64(each.cpu.Microseconds()))
		}
		if s.Allocs > 0 || s.Bytes > 0 {
			extra += fmt.Sprintf("; %.1f%% of its allocations", 100*s.Allocs)
			if each.allocs > 0 {
				extra += fmt.Sprintf(", %.0f a call (%.1f KB)", s.Allocs*each.allocs, s.Bytes*each.bytes/1024)
			}
		}
		rows = append(rows, Row{Name: of + ": " + s.Component, Extra: extra})
	}
	return rows
}
