package netwake

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pair is a wrapped server side (budget per read) and a plain client side
// of one loopback TCP connection.
func pair(t *testing.T, budget time.Duration) (server net.Conn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	wrapped := Listener(ln, budget)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := wrapped.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if _, ok := server.(*conn); !ok {
		t.Fatalf("accepted %T; want the package's conn", server)
	}
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return server, client
}

// saturate keeps goroutines runnable on every processor until the test
// ends, and returns once the sampler reads the processors as saturated, so
// that reads retry on their timer.
func saturate(t *testing.T) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for !stop.Load() {
				runtime.Gosched()
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	for deadline := time.Now().Add(10 * time.Second); !processors.saturated(); {
		if time.Now().After(deadline) {
			t.Fatal("the sampler never read the processors as saturated")
		}
		time.Sleep(time.Millisecond)
	}
}

// retriedSince waits, at most ten seconds, until reads retried on their
// timer more than before, and reports whether they did.
func retriedSince(before int64) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if retried.Load() > before {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// TestReadsWhatWasWritten: the wrapped side reads every byte the other
// side wrote, in order, on a quiet process and on a saturated one (where
// reads retry on their timer).
func TestReadsWhatWasWritten(t *testing.T) {
	var before int64
	for _, busy := range []bool{false, true} {
		server, client := pair(t, 20*time.Millisecond)
		if busy {
			saturate(t)
			before = retried.Load()
		}
		want := make([]byte, 0, 1<<20)
		for i := range 200 {
			chunk := make([]byte, rand.IntN(8<<10)+1)
			for j := range chunk {
				chunk[j] = byte(i + j)
			}
			want = append(want, chunk...)
		}
		go func() {
			for i, rest := 0, want; len(rest) > 0; i++ {
				n := min(len(rest), rand.IntN(4<<10)+1)
				if _, err := client.Write(rest[:n]); err != nil {
					return
				}
				rest = rest[n:]
				if i%10 == 0 {
					// Paced: the reader finds no data now and then.
					time.Sleep(time.Millisecond)
				}
			}
		}()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(server, got); err != nil {
			t.Fatalf("busy=%v: %v", busy, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("busy=%v: read bytes differ from those written", busy)
		}
	}
	if retried.Load() == before {
		t.Error("no read retried on its timer on a saturated process")
	}
}

// TestEndsAsATCPConnDoes: on a saturated process, where a read retries on
// its timer (a budget of a minute here), the other side's close is io.EOF,
// a read deadline ends the read with the timeout, and a close ends a read
// that is retrying.
func TestEndsAsATCPConnDoes(t *testing.T) {
	saturate(t)

	server, client := pair(t, time.Minute)
	_ = client.Close()
	if n, err := server.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v; want 0, io.EOF", n, err)
	}

	server, _ = pair(t, time.Minute)
	if err := server.SetReadDeadline(time.Now().Add(30 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := server.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("past the read deadline: %v; want a timeout", err)
	}

	// A deadline set while the read retries ends it too.
	server, _ = pair(t, time.Minute)
	done := make(chan error, 1)
	before := retried.Load()
	go func() {
		_, err := server.Read(make([]byte, 8))
		done <- err
	}()
	if !retriedSince(before) {
		t.Fatal("the read never retried on its timer")
	}
	if err := server.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a deadline set while the read retried: %v; want a timeout", err)
	}

	server, _ = pair(t, time.Minute)
	before = retried.Load()
	go func() {
		_, err := server.Read(make([]byte, 8))
		done <- err
	}()
	if !retriedSince(before) {
		t.Fatal("the read never retried on its timer")
	}
	_ = server.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a read when the connection closed: %v; want net.ErrClosed", err)
	}
}

// TestLeavesOtherConnectionsAlone: a budget under one retry, or a
// connection that is not TCP, is returned as it is.
func TestLeavesOtherConnectionsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if got := Conn(a, time.Millisecond); got != a {
		t.Errorf("a pipe came back as %T", got)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	for _, budget := range []time.Duration{0, RetryEvery - 1} {
		if got := Listener(ln, budget); got != ln {
			t.Errorf("budget %v: the listener came back as %T", budget, got)
		}
	}
}
