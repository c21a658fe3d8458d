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

// pair is a wrapped server side and a plain client side of one loopback
// TCP connection.
func pair(t *testing.T) (server net.Conn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	wrapped := Listener(ln, 20*time.Millisecond)
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
// ends, so that reads retry on their timer.
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
}

// TestReadsWhatWasWritten: the wrapped side reads every byte the other
// side wrote, in order, on a quiet process and on a saturated one (where
// reads retry on their timer).
func TestReadsWhatWasWritten(t *testing.T) {
	for _, busy := range []bool{false, true} {
		server, client := pair(t)
		if busy {
			saturate(t)
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
	if retried.Load() == 0 {
		t.Error("no read retried on its timer on a saturated process")
	}
}

// TestEndsAsATCPConnDoes: the other side's close is io.EOF, a read deadline
// ends a read with the timeout, and a close unblocks a read, each on a
// saturated process, where the read would otherwise retry.
func TestEndsAsATCPConnDoes(t *testing.T) {
	saturate(t)

	server, client := pair(t)
	_ = client.Close()
	if n, err := server.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v; want 0, io.EOF", n, err)
	}

	server, _ = pair(t)
	if err := server.SetReadDeadline(time.Now().Add(30 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := server.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("past the read deadline: %v; want a timeout", err)
	}
	if err := server.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	server, _ = pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := server.Read(make([]byte, 8))
		done <- err
	}()
	_ = server.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a read when the connection closed: %v; want net.ErrClosed", err)
	}
}

// TestLeavesOtherConnectionsAlone: no budget, or a connection that is not
// TCP, is returned as it is.
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
	if got := Listener(ln, 0); got != ln {
		t.Errorf("no budget: the listener came back as %T", got)
	}
}
