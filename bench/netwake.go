package bench

import (
	"context"
	"errors"
	"fmt"
	"hyapp/room-service/internal/netwake"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// NetWake measures how late a Go process whose processors never run out of
// work hears its sockets: a one-byte round trip over loopback TCP between
// two goroutines of this process, alone and beside each count of busy
// goroutines (goroutines that always have work: a short computation, then a
// yield), then beside the last count with both ends reading through
// internal/netwake (as grpc_listen's connections do), and last through
// netwake on idle processors, one round trip every 2 ms (where its reads
// must park as any other). Each case runs for at most d.
//
// Go's scheduler polls the network when a processor runs out of work;
// while every processor has some, only its monitor thread polls it, every
// 10 ms (golang/go#51651). A read that parked then waits up to 10 ms for
// data that is already there, on each side of the round trip. A service
// whose two cores are saturated hears each request that way, which is
// part of what a call waits outside its handler (docs/benchmarks.md, "Where a hot room's call waits").
func NetWake(ctx context.Context, busy []int, d time.Duration) ([]Row, error) {
	if len(busy) == 0 {
		return nil, errors.New("netwake: no busy counts")
	}
	var wake atomic.Bool // the connections read through netwake
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer func() { _ = ln.Close() }()
	var echoes sync.WaitGroup
	echoes.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if wake.Load() {
				c = netwake.Conn(c, netWakeBudget)
			}
			echoes.Go(func() {
				defer func() { _ = c.Close() }()
				b := make([]byte, 1)
				for {
					if _, err := io.ReadFull(c, b); err != nil {
						return
					}
					if _, err := c.Write(b); err != nil {
						return
					}
				}
			})
		}
	})
	defer echoes.Wait()
	defer func() { _ = ln.Close() }()

	var rows []Row
	var idle time.Duration
	cases := make([]netWakeRun, 0, len(busy)+2)
	for _, n := range busy {
		cases = append(cases, netWakeRun{busy: n})
	}
	cases = append(cases,
		netWakeRun{busy: busy[len(busy)-1], wake: true},
		// Through netwake on idle processors, a round trip every 2 ms:
		// the reads park between them and must not wait on their timer.
		netWakeRun{wake: true, pace: 2 * time.Millisecond})
	for _, run := range cases {
		wake.Store(run.wake)
		r, err := netWakeCase(ctx, ln.Addr().String(), run, d)
		if err != nil {
			return rows, err
		}
		if len(rows) == 0 {
			idle = r.P50
		}
		r.Extra = fmt.Sprintf("%d processors; p50 %.0fx the first row's", runtime.GOMAXPROCS(0), float64(r.P50)/float64(max(idle, time.Nanosecond)))
		rows = append(rows, r)
	}
	return rows, nil
}

// netWakeBudget is the scenario's netwake budget per read: grpc_busy_read's
// default.
const netWakeBudget = 20 * time.Millisecond

// netWakeRun is one case of NetWake: busy goroutines beside the round
// trips, reads through netwake or not, and the pause between round trips.
type netWakeRun struct {
	busy int
	wake bool
	pace time.Duration
}

// netWakeCase runs the round trips of run to addr for d (at most 100,000)
// and stops its busy goroutines before it returns.
func netWakeCase(ctx context.Context, addr string, run netWakeRun, d time.Duration) (Row, error) {
	n := run.busy
	var stop atomic.Bool
	var spinners sync.WaitGroup
	defer spinners.Wait()
	defer stop.Store(true)
	for range n {
		spinners.Go(func() {
			x := 0
			for !stop.Load() {
				for j := range 2000 {
					x += j
				}
				runtime.Gosched()
			}
			_ = x
		})
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Row{}, err
	}
	name := fmt.Sprintf("loopback round trip, %d busy goroutines", n)
	if run.pace > 0 {
		name = fmt.Sprintf("loopback round trip every %v, %d busy goroutines", run.pace, n)
	}
	if run.wake {
		c, name = netwake.Conn(c, netWakeBudget), name+", reads through netwake"
	}
	defer func() { _ = c.Close() }()
	lat := make([]time.Duration, 0, 1024)
	b := []byte{1}
	start := time.Now()
	for time.Since(start) < d && len(lat) < 100_000 && ctx.Err() == nil {
		t := time.Now()
		if _, err := c.Write(b); err != nil {
			return Row{}, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return Row{}, err
		}
		lat = append(lat, time.Since(t))
		if run.pace > 0 {
			time.Sleep(run.pace)
		}
	}
	if len(lat) == 0 {
		return Row{}, errors.Join(errors.New("no round trip finished"), ctx.Err())
	}
	r := Row{Name: name, Ops: len(lat), Elapsed: time.Since(start)}
	r.P50, r.P99 = percentiles(lat)
	return r, nil
}
