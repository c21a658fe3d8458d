package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
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
	if want := (serviceCost{cpu: 2, allocs: 1000, bytes: 1 << 20, commands: 500, commits: 20}); !ok || !reflect.DeepEqual(a, want) {
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

// TestServedP99IsTheBucketOfTheRowsOwnCalls: the service's own p99 of a
// row is read from the difference of two reads of its latency histogram,
// for the row's procedure alone: the bucket that holds 99% of the calls
// served between them, not of all calls since the service started.
func TestServedP99IsTheBucketOfTheRowsOwnCalls(t *testing.T) {
	const join, read = "/room.v1.RoomService/JoinRoom", "/room.v1.RoomService/GetRoomSnapshot"
	page := func(fast, mid, slow, reads float64) string {
		h := "# HELP room_rpc_duration_seconds x\nprocess_cpu_seconds_total 1\ngo_memstats_mallocs_total 1\n"
		for _, b := range []struct {
			le string
			n  float64
		}{{"0.004", fast}, {"0.008", fast + mid}, {"0.016", fast + mid + slow}, {"+Inf", fast + mid + slow}} {
			h += fmt.Sprintf("room_rpc_duration_seconds_bucket{procedure=%q,le=%q} %g\n", join, b.le, b.n)
			h += fmt.Sprintf("room_rpc_duration_seconds_bucket{procedure=%q,le=%q} %g\n", read, b.le, reads)
		}
		return h + fmt.Sprintf("room_rpc_duration_seconds_sum{procedure=%q} 9\n", join)
	}
	// Before the row: a thousand slow joins. The row: 1,000 joins, 990
	// of them fast and 10 in the middle bucket.
	body := page(0, 0, 1000, 50)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	a, _ := processCost(context.Background(), srv.URL)
	body = page(990, 10, 1000, 50)
	b, _ := processCost(context.Background(), srv.URL)
	if lo, hi, ok := servedP99(a, b, join); !ok || lo != 0 || hi != 0.004 {
		t.Fatalf("p99 of 990 fast joins of 1,000: %g-%g s, %v; want 0-0.004", lo, hi, ok)
	}
	body = page(990, 20, 1000, 50)
	c, _ := processCost(context.Background(), srv.URL)
	if lo, hi, ok := servedP99(a, c, join); !ok || lo != 0.004 || hi != 0.008 {
		t.Fatalf("p99 of 990 fast joins of 1,010: %g-%g s, %v; want 0.004-0.008", lo, hi, ok)
	}
	if _, _, ok := servedP99(a, c, read); ok {
		t.Fatal("a p99 of reads where no read was served")
	}
	if _, _, ok := servedP99(a, c, "/room.v1.RoomService/LeaveRoom"); ok {
		t.Fatal("a p99 of a procedure the page does not have")
	}
}
