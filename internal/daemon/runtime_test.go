package daemon

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	"hyapp/room-service/config"
)

func TestTuneRuntime(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	t.Setenv("GOMEMLIMIT", "")
	log := slog.New(slog.DiscardHandler)
	none := func(string) string { return "" }

	cfg := config.Default()
	got := tuneRuntime(cfg, none, log)
	if p := debug.SetGCPercent(100); p != cfg.GCPercent {
		t.Errorf("GOGC after gc_percent %d: %d (logged %v)", cfg.GCPercent, p, got)
	}
	if n := debug.SetMemoryLimit(-1); n == math.MaxInt64 || n <= 0 {
		t.Errorf("memory limit after memory_limit_percent %d: %d (logged %v)", cfg.MemoryLimitPercent, n, got)
	}

	// The runtime's own settings win; 0 leaves the runtime alone.
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(math.MaxInt64)
	gogc := func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	}
	cfg.MemoryLimitPercent = 0
	got = tuneRuntime(cfg, gogc, log)
	if p := debug.SetGCPercent(100); p != 150 {
		t.Errorf("GOGC=150 in the environment: the collector runs at %d (logged %v)", p, got)
	}
	if n := debug.SetMemoryLimit(-1); n != math.MaxInt64 {
		t.Errorf("memory_limit_percent 0 set a limit of %d bytes (logged %v)", n, got)
	}
	cfg.GCPercent = 0
	debug.SetGCPercent(100)
	tuneRuntime(cfg, none, log)
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("gc_percent 0 changed the collector to %d", p)
	}
}
