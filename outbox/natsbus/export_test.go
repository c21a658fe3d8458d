package natsbus

// RunsSent is the number of fast batches the broker acknowledged whole, and
// whether the stream takes them at all.
func RunsSent(b *Bus) (int64, bool) { return b.runsSent.Load(), b.runs.Load() }
