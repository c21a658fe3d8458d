package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"hyapp/room-service/rpc"
)

// TestShutdownServerCutsWhatOutlivesItsContext: a call still running when
// the shutdown's context ends is cut, its connection closed, instead of
// holding the server open for as long as it runs.
func TestShutdownServerCutsWhatOutlivesItsContext(t *testing.T) {
	entered, left := make(chan struct{}), make(chan struct{})
	srv := rpc.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // runs until its connection goes
		close(left)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	client := rpc.NewHopClient(0) // HTTP/2: the connection-level shutdown path
	defer client.CloseIdleConnections()
	answered := make(chan error, 1)
	go func() {
		res, err := client.Get("http://" + ln.Addr().String() + "/")
		if err == nil {
			res.Body.Close()
		}
		answered <- err
	}()
	<-entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the call outlives the shutdown's time
	if err := shutdownServer(ctx, srv); !errors.Is(err, context.Canceled) {
		t.Fatalf("shutdown: %v, want %v", err, context.Canceled)
	}
	deadline := time.After(time.Minute)
	select {
	case <-left:
	case <-deadline:
		t.Fatal("the handler's connection is still open a minute after the shutdown")
	}
	select {
	case err := <-answered:
		if err == nil {
			t.Fatal("the cut call was answered")
		}
	case <-deadline:
		t.Fatal("the client still waits for the cut call")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve: %v", err)
	}
}
