package bench

import (
	"runtime"
	"testing"
	"time"
)

// TestNetWakeMeasuresEachCaseAndStopsItsGoroutines: a row per busy count
// and two through netwake, each of round trips that finished, and no goroutine of the scenario
// (echo server, connections, busy goroutines) outlives it.
func TestNetWakeMeasuresEachCaseAndStopsItsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	rows, err := NetWake(t.Context(), []int{0, 2}, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows; want one per busy count and two through netwake", len(rows))
	}
	for _, r := range rows {
		if r.Ops == 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Elapsed <= 0 {
			t.Errorf("%s: %d round trips in %v, p50 %v, p99 %v", r.Name, r.Ops, r.Elapsed, r.P50, r.P99)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the scenario; %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
