package natsbus

// RunsSent is the number of fast batches the broker acknowledged whole, and
// whether the stream takes them at all.
func RunsSent(b *Bus) (int64, bool) { return b.runsSent.Load(), b.runs.Load() }

// SetSendHook has f run before each batch of many rooms' rows goes out, on
// the goroutine that sends it, until the test ends.
func SetSendHook(t interface{ Cleanup(func()) }, f func(rows int)) {
	testHookSend = f
	t.Cleanup(func() { testHookSend = nil })
}

// MaxRun is the most rows a batch carries.
const MaxRun = maxRun
