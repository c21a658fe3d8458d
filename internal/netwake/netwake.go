// Package netwake reads TCP connections without waiting for Go's network
// poller while the process's processors are saturated.
//
// Go's scheduler polls the network when a processor runs out of work.
// While every processor has work queued, only the runtime's monitor thread
// polls it, every 10 ms (described in golang/go#51651). A read that found
// no data and parked then waits up to 10 ms for data that is already
// there: a service whose cores are saturated hears each request late. A
// timer, though, is served on every turn of the scheduler. So a read of
// this package that finds no data while every processor is running and
// goroutines wait for one (sampled every millisecond from runtime/metrics,
// only while such reads happen) reads again after RetryEvery on a timer, for
// at most the connection's budget, and parks as usual otherwise: when a
// processor has time, when its read deadline is near, when the connection
// is closing, and once the budget is spent.
//
// roomctl bench -only netwake measures the poller's delay and what these
// reads make of it.
package netwake

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"time"
)

// RetryEvery is how long a read waits on its timer before it reads again.
const RetryEvery = time.Millisecond

const (
	runnableMetric = "/sched/goroutines/runnable:goroutines"
	runningMetric  = "/sched/goroutines/running:goroutines"
	sampleEvery    = time.Millisecond
	// sampleFor is how long the sampler runs after the last read that
	// asked it.
	sampleFor = time.Second
)

// Listener returns ln, whose TCP connections read as Conn's, each retrying
// for at most budget per read (under RetryEvery: ln itself).
func Listener(ln net.Listener, budget time.Duration) net.Listener {
	if budget < RetryEvery {
		return ln
	}
	return listener{ln, budget}
}

type listener struct {
	net.Listener
	budget time.Duration
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return Conn(c, l.budget), nil
}

// Conn returns c reading as the package says, retrying for at most budget
// per read; c itself when budget is under RetryEvery or c is no
// *net.TCPConn.
func Conn(c net.Conn, budget time.Duration) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || budget < RetryEvery {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &conn{TCPConn: tc, rc: rc, budget: budget}
}

// conn is a TCP connection whose Read retries on a timer while the
// processors are saturated. Everything else is the TCPConn's.
type conn struct {
	*net.TCPConn
	rc       syscall.RawConn
	budget   time.Duration
	deadline atomic.Pointer[time.Time] // the read deadline; nil: none
	closing  atomic.Bool
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	var n int
	var rerr error
	var waited time.Duration // over the whole Read, the poller's wakes included
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			switch {
			case errors.Is(rerr, syscall.EINTR):
				continue
			case !errors.Is(rerr, syscall.EAGAIN):
				return true
			case waited+RetryEvery > c.budget || c.closing.Load() || c.deadlineWithin(RetryEvery) || !processors.saturated():
				return false // park: the poller, its deadline and its close take it from here
			}
			retried.Add(1)
			time.Sleep(RetryEvery)
			waited += RetryEvery
		}
	})
	switch {
	case err != nil:
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
		}
		return 0, c.opError(err)
	case rerr != nil:
		return 0, c.opError(os.NewSyscallError("read", rerr))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *conn) opError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// deadlineWithin reports whether the read deadline is set and less than d
// away.
func (c *conn) deadlineWithin(d time.Duration) bool {
	at := c.deadline.Load()
	return at != nil && time.Until(*at) < d
}

func (c *conn) SetDeadline(t time.Time) error {
	c.setReadDeadline(t)
	return c.TCPConn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.setReadDeadline(t)
	return c.TCPConn.SetReadDeadline(t)
}

func (c *conn) setReadDeadline(t time.Time) {
	if t.IsZero() {
		c.deadline.Store(nil)
		return
	}
	c.deadline.Store(&t)
}

// Close stops a read retrying at once, then closes the connection (which
// waits for a read inside the connection to return).
func (c *conn) Close() error {
	c.closing.Store(true)
	return c.TCPConn.Close()
}

// retried counts the retries of reads on their timer.
var retried atomic.Int64

// processors samples whether goroutines wait for a processor.
var processors sampler

// sampler samples the runtime's counts of running and runnable goroutines
// every sampleEvery, while reads ask it (saturated) and for sampleFor after.
// A sample is busy when every processor runs a goroutine and more wait: a
// runnable goroutine beside an idle processor (one a timer just woke, as
// the retries' own) is not saturation, and that processor polls the
// network.
type sampler struct {
	busy    atomic.Bool  // most of the last samples were busy
	running atomic.Bool  // a sampling goroutine runs
	asked   atomic.Int64 // the last ask, Unix nanoseconds
}

// saturated reports whether goroutines have been waiting for a processor
// lately, and keeps the sampler running.
func (s *sampler) saturated() bool {
	s.asked.Store(time.Now().UnixNano())
	if !s.running.Load() && s.running.CompareAndSwap(false, true) {
		go s.run()
	}
	return s.busy.Load()
}

func (s *sampler) run() {
	samples := []metrics.Sample{{Name: runnableMetric}, {Name: runningMetric}}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	score := 0 // +1 a busy sample, -1 another, within [0, 4]
	for now := range t.C {
		if now.UnixNano()-s.asked.Load() > int64(sampleFor) {
			s.busy.Store(false)
			s.running.Store(false)
			return // the next ask starts another
		}
		metrics.Read(samples)
		if busySample(samples[0].Value, samples[1].Value, runtime.GOMAXPROCS(0)) {
			score = min(score+1, 4)
		} else {
			score = max(score-1, 0)
		}
		s.busy.Store(score >= 2)
	}
}

// busySample reports whether every one of procs processors runs a
// goroutine and at least one more goroutine waits for one.
func busySample(runnable, running metrics.Value, procs int) bool {
	if runnable.Kind() != metrics.KindUint64 || running.Kind() != metrics.KindUint64 {
		return false // a runtime without these counts: never saturated
	}
	return runnable.Uint64() > 0 && running.Uint64() >= uint64(procs)
}
