package daemon

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/grpchealth"
	driver "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/store/mysql/mysqltest"
)

// readyz returns /readyz's status and body.
func readyzOf(t *testing.T, addr string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// TestReadinessFollowsTheDatabaseAndNATS runs the service on MariaDB and an
// external NATS, each reached through a proxy, cuts each in turn and waits
// for /readyz and gRPC health to say which check fails, then for both to
// turn ready again once the dependency is back. /livez stays 200.
func TestReadinessFollowsTheDatabaseAndNATS(t *testing.T) {
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	cfg, err := driver.ParseDSN(mysqltest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	db := mysqltest.NewProxy(t, cfg.Addr)
	cfg.Addr = db.Addr()
	cfg.Params = map[string]string{"readTimeout": "2s", "writeTimeout": "2s", "timeout": "1s"}
	broker := mysqltest.NewProxy(t, "127.0.0.1:4222") // a plain TCP proxy
	m, _ := runMain(t, t.TempDir(), append([]string{"-mysql-dsn", cfg.FormatDSN(), "-nats-url", "nats://" + broker.Addr()},
		ownStream(t, "readyz")...)...)

	ready := func(what string) {
		t.Helper()
		poll.Until(t, 30*time.Second, what, func() error {
			if code, body := readyzOf(t, m.Addr); code != http.StatusOK {
				return &notReady{code, body}
			}
			return nil
		})
		res, err := m.ready.Check(context.Background(), &grpchealth.CheckRequest{})
		if err != nil || res.Status != grpchealth.StatusServing {
			t.Fatalf("%s: gRPC health %v %v", what, res, err)
		}
	}
	unready := func(check, what string) {
		t.Helper()
		poll.Until(t, 30*time.Second, what, func() error {
			code, body := readyzOf(t, m.Addr)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, check+": failing for") {
				return &notReady{code, body}
			}
			return nil
		})
		res, err := m.ready.Check(context.Background(), &grpchealth.CheckRequest{})
		if err != nil || res.Status != grpchealth.StatusNotServing {
			t.Fatalf("%s: gRPC health %v %v", what, res, err)
		}
		if res, err := http.Get("http://" + m.Addr + "/livez"); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("/livez while not ready: %v %v", res, err)
		}
	}

	ready("ready at start")
	db.Cut()
	unready("storage", "not ready with the database away")
	db.Restore()
	ready("ready once the database is back")
	broker.Cut()
	unready("nats", "not ready with NATS away")
	broker.Restore()
	ready("ready once NATS is back")
}

type notReady struct {
	code int
	body string
}

func (e *notReady) Error() string { return http.StatusText(e.code) + ": " + strings.TrimSpace(e.body) }

// TestReadinessWaitsOutTheGrace checks the grace with a clock: a
// dependency failing for less than the grace leaves the node ready; one
// failing the whole grace makes it not ready; an answer makes it ready.
func TestReadinessWaitsOutTheGrace(t *testing.T) {
	r := newReadiness(grpchealth.NewStaticChecker(), prometheus.NewRegistry())
	var fail error
	r.add("nats", func(context.Context) error { return fail })
	start := time.Now()
	at := func(d time.Duration) func() time.Time { return func() time.Time { return start.Add(d) } }
	ctx := context.Background()
	fail = context.DeadlineExceeded
	r.probe(ctx, at(0))
	r.probe(ctx, at(healthGrace-time.Second))
	if why := r.state(start.Add(healthGrace - time.Second)); why != "" {
		t.Fatalf("not ready within the grace: %s", why)
	}
	r.probe(ctx, at(healthGrace))
	if why := r.state(start.Add(healthGrace)); !strings.Contains(why, "nats: failing for 5s") {
		t.Fatalf("after the grace: %q", why)
	}
	fail = nil
	r.probe(ctx, at(healthGrace+time.Second))
	if why := r.state(start.Add(healthGrace + time.Second)); why != "" {
		t.Fatalf("after the dependency answered: %s", why)
	}
}
