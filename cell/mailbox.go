package cell

import "sync"

// mailbox is a cell's bounded queue. It holds memory in proportion to what
// is queued, not to its bound, so fifty thousand idle rooms cost nothing
// here while a hot room may queue thousands. A full mailbox refuses at once.
type mailbox struct {
	mu     sync.Mutex
	q      []*request
	max    int
	signal chan struct{} // holds one token while the queue is non-empty
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

func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.q)
}
