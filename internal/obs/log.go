package obs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps a slog.Handler so that every record logged with a
// context that carries a span (log.InfoContext(ctx, …)) has trace_id and
// span_id, joining the log line to its trace.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}

// Sometimes lets a kind of log line out at most once per Every: the lines
// that come sooner are held back and counted, and the next line let out
// says how many were. An outage, or a client sending what is refused, then
// writes a line a second instead of one per event. The zero value lets
// every line out. Safe for concurrent use.
type Sometimes struct {
	Every time.Duration

	mu   sync.Mutex
	last time.Time // when the last line went out; zero: none yet
	held int
}

// Allow reports whether a line may go out at now, and if so how many lines
// were held back since the last one that went out.
func (s *Sometimes) Allow(now time.Time) (ok bool, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && !now.Before(s.last) && now.Sub(s.last) < s.Every {
		s.held++
		return false, 0
	}
	held, s.last, s.held = s.held, now, 0
	return true, held
}
