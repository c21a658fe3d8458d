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
// failures, ctx's end among them). When it returns, no callback of the call
// runs any more and nothing after rows[n] goes out; rows[n] itself may
// still reach the broker when ctx ended while it was on its way, as with
// a Publish whose ctx ended. A row whose publish has a span of its own
// goes through Publish, which puts that span in the message.
//
// When the stream takes fast batches, runs of minRun to maxRun rows go as
// one each (see publishRun): each is called for a run's rows once the
// broker acknowledged them all, and false stops the sequence after that
// run. A run that failed goes on one row at a time from its first row the
// broker did not acknowledge (each called for those before it), so that the
// error returned is that row's own. Shorter sequences of many rooms share
// fast batches while enough of them run at once (see gatherer).
func (b *Bus) PublishInOrder(ctx context.Context, rows []outbox.Record, each func(i int) bool) (int, error) {
	n, err := b.publishInOrder(ctx, rows, each)
	if err != nil {
		b.remake(ctx, err)
	}
	return n, err
}

// publishInOrder is PublishInOrder but for the stream's remaking.
func (b *Bus) publishInOrder(ctx context.Context, rows []outbox.Record, each func(i int) bool) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, publishErr(rows[0], err)
	}
	if each == nil {
		each = func(int) bool { return true }
	}
	if len(rows) < minRun && b.gather != nil {
		return b.gather.publish(ctx, b, rows, each)
	}
	done := 0
	for len(rows)-done >= minRun && b.runs.Load() {
		run, goOn := rows[done:min(len(rows), done+maxRun)], true
		n, err := b.publishRun(ctx, run, func(i int) bool {
			goOn = each(done+i) && goOn
			return goOn
		})
		done += n
		if err == nil && goOn {
			continue
		}
		if !goOn {
			return done, nil // stopped by each, on a row acknowledged before any failure
		}
		if err == nil || ctx.Err() != nil {
			return done, err
		}
		b.log.Debug("fast batch failed: the rest goes one at a time", "rows", len(run), "acknowledged", n, "err", err)
		break
	}
	if done == len(rows) {
		return done, nil
	}
	m, err := b.publishSingly(ctx, rows[done:], func(i int) bool { return each(done + i) })
	return done + m, err
}

// publishSingly is PublishInOrder one row at a time.
func (b *Bus) publishSingly(ctx context.Context, rows []outbox.Record, each func(i int) bool) (int, error) {
	o := b.order
	s := &sequence{rows: rows, each: each, done: make(chan struct{}), busy: 1}
	o.send(b, s)
	select {
	case <-s.done:
	case <-ctx.Done():
		o.mu.Lock()
		if !s.over {
			s.stop = ctx.Err()
			if s.busy == 0 {
				s.end(s.stopErr())
			} // else the step under way ends it
		}
		o.mu.Unlock()
		<-s.done
	}
	o.mu.Lock()
	defer o.mu.Unlock()
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
	busy int   // steps under way (a send, or an ack's callback and the send after it)
	stop error // the caller stopped waiting (ctx's end): the step under way ends the sequence
}

// end ends the sequence with err; inOrder.mu is held.
func (s *sequence) end(err error) {
	s.over, s.err = true, err
	close(s.done)
}

// stopErr is the error a stopped sequence ends with.
func (s *sequence) stopErr() error {
	if s.n < len(s.rows) {
		return publishErr(s.rows[s.n], s.stop)
	}
	return nil // the last ack came in meanwhile
}

// leave ends a step; the last step of a stopped sequence ends it.
// inOrder.mu is held.
func (s *sequence) leave() {
	s.busy--
	if s.busy == 0 && s.stop != nil && !s.over {
		s.end(s.stopErr())
	}
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

// send publishes the sequence's next row, as one of its steps: the caller
// counted it in busy, and send leaves.
func (o *inOrder) send(b *Bus, s *sequence) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s.over || s.stop != nil {
		s.leave()
		return
	}
	row := s.rows[s.n]
	msg, err := b.message(row)
	if err != nil {
		s.end(fmt.Errorf("publish: %w", err))
		s.leave()
		return
	}
	o.inFlight[msg] = s
	o.mu.Unlock()
	_, err = o.js.PublishMsgAsync(msg, jetstream.WithExpectStream(b.cfg.Stream))
	o.mu.Lock()
	if err != nil && o.inFlight[msg] == s {
		delete(o.inFlight, msg)
		if !s.over {
			s.end(publishErr(row, b.connErr(err)))
		}
	}
	s.leave()
}

// connErr names the connection's state in err when the library says it in
// words only (it does when its reply subscription cannot be made).
func (b *Bus) connErr(err error) error {
	switch {
	case b.nc.IsClosed() && !errors.Is(err, nats.ErrConnectionClosed):
		return fmt.Errorf("%w: %w", nats.ErrConnectionClosed, err)
	case b.nc.IsDraining() && !errors.Is(err, nats.ErrConnectionDraining):
		return fmt.Errorf("%w: %w", nats.ErrConnectionDraining, err)
	}
	return err
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
	s.busy++
	o.mu.Unlock()
	goOn := s.each == nil || s.each(i)
	if i+1 < len(s.rows) && goOn {
		o.send(b, s)
		return
	}
	o.mu.Lock()
	if !s.over {
		s.end(nil)
	}
	s.leave()
	o.mu.Unlock()
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
