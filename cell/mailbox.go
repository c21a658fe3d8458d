package cell

import (
	"sync"
	"time"
)

// mailbox is a cell's bounded queue. It holds memory in proportion to what
// is queued, not to its bound, so fifty thousand idle rooms cost nothing
// here while a hot room may queue thousands. A full mailbox refuses at once.
type mailbox struct {
	mu     sync.Mutex
	q      []*request
	max    int
	signal chan struct{} // holds one token while the queue is non-empty
	want   int           // await's target length, while it waits
	filled chan struct{} // closed once the queue reaches want
}

func newMailbox(max int) *mailbox {
	return &mailbox{max: max, signal: make(chan struct{}, 1)}
}

// push queues r, or reports false when the mailbox is full.
func (m *mailbox) push(r *request) bool {
	m.mu.Lock()
	if len(m.q) >= m.max {
		m.mu.Unlock()
		return false
	}
	m.q = append(m.q, r)
	if m.filled != nil && len(m.q) >= m.want {
		close(m.filled)
		m.filled = nil
	}
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default:
	}
	return true
}

// take moves up to n queued requests to dst, oldest first.
func (m *mailbox) take(dst []*request, n int) []*request {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := min(n, len(m.q))
	dst = append(dst, m.q[:k]...)
	rest := copy(m.q, m.q[k:])
	clear(m.q[rest:])
	m.q = m.q[:rest]
	if rest == 0 && cap(m.q) > 64 {
		m.q = nil // a burst is over: give its memory back
	}
	return dst
}

// await waits until the mailbox holds n requests, d has passed or stop is
// closed. Only the cell waits; the push that reaches n wakes it, the others
// do not.
func (m *mailbox) await(n int, d time.Duration, stop <-chan struct{}) {
	m.mu.Lock()
	if len(m.q) >= n {
		m.mu.Unlock()
		return
	}
	filled := make(chan struct{})
	m.want, m.filled = n, filled
	m.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-filled:
	case <-t.C:
	case <-stop:
	}
	t.Stop()
	m.mu.Lock()
	m.want, m.filled = 0, nil
	m.mu.Unlock()
}

func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.q)
}
