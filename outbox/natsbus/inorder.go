package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/outbox"
)

// PublishInOrder publishes rows in order, each once the broker acknowledged
// the one before it, as Publish one after another would, but without a
// goroutine waiting for each ack: the next row goes out from the
// acknowledgement's callback on the client's goroutine, which takes the
// acks of every caller's rows as they come. A relay with hundreds of rooms
// in flight wakes once per room's rows, not once per row.
//
// each, when not nil, is called on that goroutine once rows[i] is
// acknowledged, before rows[i+1] goes out; it must not block, and false
// stops the sequence there. PublishInOrder returns the number of rows
// acknowledged and, when rows[n] failed, its error, wrapped as Publish
// wraps it (outbox.ErrTransient for the broker's or the connection's
// failures, ctx's end among them). A row whose publish has a span of its
// own goes through Publish, which puts that span in the message.
func (b *Bus) PublishInOrder(ctx context.Context, rows []outbox.Record, each func(i int) bool) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	s := &sequence{rows: rows, each: each, done: make(chan struct{})}
	b.order.send(b, s)
	select {
	case <-s.done:
	case <-ctx.Done():
		b.order.mu.Lock()
		switch {
		case s.over:
		case s.n < len(rows):
			s.end(publishErr(rows[s.n], ctx.Err()))
		default:
			s.end(nil) // the last ack came in meanwhile
		}
		b.order.mu.Unlock()
	}
	b.order.mu.Lock()
	defer b.order.mu.Unlock()
	return s.n, s.err
}

// inOrder runs the sequences of PublishInOrder on a JetStream context of
// their own whose acknowledgements and failures come to its callbacks.
// Each sequence has at most one message in flight, found again by the
// message the callback is handed.
type inOrder struct {
	js jetstream.JetStream

	mu       sync.Mutex // never held while calling into js: its timeout callback holds js's lock
	inFlight map[*nats.Msg]*sequence
}

// sequence is one PublishInOrder call.
type sequence struct {
	rows []outbox.Record
	each func(i int) bool
	done chan struct{} // closed when over

	// Under inOrder.mu:
	n    int   // rows acknowledged
	err  error // why rows[n] did not go out
	over bool
}

// end ends the sequence with err; inOrder.mu is held.
func (s *sequence) end(err error) {
	s.over, s.err = true, err
	close(s.done)
}

func newInOrder(nc *nats.Conn, b *Bus) (*inOrder, error) {
	o := &inOrder{inFlight: make(map[*nats.Msg]*sequence)}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { o.acked(b, m) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { o.failed(m, err) }),
		// A sequence has one message in flight: the library's bound, which
		// would stall a callback's publish, is never reached by callers
		// that bound their sequences (the relay: MaxRooms).
		jetstream.WithPublishAsyncMaxPending(1<<20),
		jetstream.WithPublishAsyncTimeout(b.cfg.PublishTimeout),
	)
	if err != nil {
		return nil, err
	}
	o.js = js
	return o, nil
}

// send publishes the sequence's next row.
func (o *inOrder) send(b *Bus, s *sequence) {
	o.mu.Lock()
	if s.over {
		o.mu.Unlock()
		return
	}
	row := s.rows[s.n]
	msg, err := b.message(row)
	if err != nil {
		s.end(fmt.Errorf("publish: %w", err))
		o.mu.Unlock()
		return
	}
	o.inFlight[msg] = s
	o.mu.Unlock()
	if _, err := o.js.PublishMsgAsync(msg, jetstream.WithExpectStream(b.cfg.Stream)); err != nil {
		if b.nc.IsClosed() && !errors.Is(err, nats.ErrConnectionClosed) {
			// The library says so in words only when its reply
			// subscription is gone with the connection.
			err = fmt.Errorf("%w: %w", nats.ErrConnectionClosed, err)
		}
		o.mu.Lock()
		if o.inFlight[msg] == s {
			delete(o.inFlight, msg)
			if !s.over {
				s.end(publishErr(row, err))
			}
		}
		o.mu.Unlock()
	}
}

// acked takes the broker's ack of m and sends the sequence's next row.
func (o *inOrder) acked(b *Bus, m *nats.Msg) {
	o.mu.Lock()
	s := o.inFlight[m]
	delete(o.inFlight, m)
	if s == nil || s.over {
		o.mu.Unlock()
		return
	}
	i := s.n
	s.n++
	o.mu.Unlock()
	goOn := s.each == nil || s.each(i)
	if i+1 == len(s.rows) || !goOn {
		o.mu.Lock()
		if !s.over {
			s.end(nil)
		}
		o.mu.Unlock()
		return
	}
	o.send(b, s)
}

// failed ends m's sequence with m's error.
func (o *inOrder) failed(m *nats.Msg, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.inFlight[m]
	delete(o.inFlight, m)
	if s != nil && !s.over {
		s.end(publishErr(s.rows[s.n], err))
	}
}
