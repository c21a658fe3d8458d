package daemon

import (
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"hyapp/room-service/config"
)

// tuneRuntime sets the Go collector from gc_percent and
// memory_limit_percent, and returns what it set, for the start log.
//
// The service keeps every loaded room, its recent command ids, the embedded
// NATS server's duplicate window and the connections' buffers in the heap,
// and the collector marks all of it once per cycle, so at the runtime's
// default (a new cycle each time the heap doubles) a call that does little
// pays for much marking: in a profile of 128 snapshot reads in flight, a
// fifth of the service's CPU. A cycle each time the heap grows by four
// times the live data costs a quarter of that marking, for a heap that may
// grow to five times the live data; the memory limit bounds that growth,
// the collector working harder as the heap nears it instead of the process
// being killed. GOGC and GOMEMLIMIT in the environment are the runtime's
// own: when set they win over both settings.
func tuneRuntime(cfg config.Config, getenv func(string) string, log *slog.Logger) []any {
	gc := strconv.Itoa(cfg.GCPercent)
	switch env := getenv("GOGC"); {
	case env != "":
		gc = "GOGC=" + env
	case cfg.GCPercent > 0:
		debug.SetGCPercent(cfg.GCPercent)
	default:
		gc = "100"
	}
	if getenv("GOMEMLIMIT") == "" && cfg.MemoryLimitPercent > 0 {
		_, err := memlimit.Set(
			memlimit.WithRatio(float64(cfg.MemoryLimitPercent)/100),
			memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)),
		)
		if err != nil {
			log.Warn("memory_limit_percent: no memory limit set", "err", err)
		}
	}
	limit := "none"
	if n := debug.SetMemoryLimit(-1); n != math.MaxInt64 {
		limit = strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return []any{"gc_percent", gc, "memory_limit", limit}
}
