package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestServiceCostReadsTheCountersAndSaysWhatEachCallCost: the counters are
// read by name from a Prometheus text page, and a row's cost is the
// difference between two reads, per call; commands per commit only where
// something committed.
func TestServiceCostReadsTheCountersAndSaysWhatEachCallCost(t *testing.T) {
	page := func(cpu, allocs, bytes, commands, commits float64) string {
		return fmt.Sprintf("# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total %g\ngo_memstats_mallocs_total %g\n"+
			"go_memstats_alloc_bytes_total %g\nroom_commit_batch_commands_sum %g\nroom_commit_batch_commands_count 7\n"+
			"room_commit_seconds_sum 3.5\nroom_commit_seconds_count %g\n", cpu, allocs, bytes, commands, commits)
	}
	body := page(2, 1000, 1<<20, 500, 20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	a, ok := processCost(context.Background(), srv.URL)
	if want := (serviceCost{cpu: 2, allocs: 1000, bytes: 1 << 20, commands: 500, commits: 20}); !ok || a != want {
		t.Fatalf("read %+v, %v; want %+v", a, ok, want)
	}
	body = page(2.5, 3000, 3<<20, 1500, 60)
	b, _ := processCost(context.Background(), srv.URL)
	if got, want := per(a, b, 1000), "service: 500 µs CPU, 2 allocs (2.0 KB) per call, 25.0 commands per commit"; got != want {
		t.Fatalf("cost %q, want %q", got, want)
	}
	body = page(3, 4000, 4<<20, 1500, 60)
	c, _ := processCost(context.Background(), srv.URL)
	if got, want := per(b, c, 500), "service: 1000 µs CPU, 2 allocs (2.0 KB) per call"; got != want {
		t.Fatalf("cost without commits %q, want %q", got, want)
	}
	body = "go_memstats_mallocs_total 5\n"
	if _, ok := processCost(context.Background(), srv.URL); ok {
		t.Fatal("a page without the CPU counter read as complete")
	}
}
