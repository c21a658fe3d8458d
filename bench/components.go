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

// Share is a component's part of a CPU profile.
type Share struct {
	Component string
	CPU       time.Duration
	Fraction  float64 // of the profile's CPU
}

// Components splits a CPU profile's samples between the service's
// components, in the order of components, the rest last; a component
// without samples is left out. The fractions add up to 1 unless the
// profile holds no CPU.
func Components(p *profile.Profile) ([]Share, error) {
	at := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("not a CPU profile: no cpu/nanoseconds sample type")
	}
	cpu := make([]time.Duration, len(components)+1)
	var total time.Duration
	for _, s := range p.Sample {
		d := time.Duration(s.Value[at])
		cpu[componentOf(s)] += d
		total += d
	}
	var shares []Share
	for i, d := range cpu {
		if d == 0 {
			continue
		}
		name := otherComponent
		if i < len(components) {
			name = components[i].name
		}
		shares = append(shares, Share{Component: name, CPU: d, Fraction: float64(d) / float64(total)})
	}
	return shares, nil
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
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(admin, "/"), max(1, int(d.Seconds())))
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

// componentRows are the rows of a profile's shares: each component's part
// of the service's CPU and, from the row's measured CPU a call, its µs a
// call.
func componentRows(of string, shares []Share, perCall time.Duration) []Row {
	rows := make([]Row, 0, len(shares))
	for _, s := range shares {
		extra := fmt.Sprintf("%.1f%% of the service's CPU", 100*s.Fraction)
		if perCall > 0 {
			extra += fmt.Sprintf(", %.0f µs a call", s.Fraction*float64(perCall.Microseconds()))
		}
		rows = append(rows, Row{Name: of + ": " + s.Component, Extra: extra})
	}
	return rows
}
