package natsbus

import (
	"context"
	"fmt"

	"github.com/synadia-io/orbit.go/jetstreamext"

	"hyapp/room-service/outbox"
)

// minRun is the fewest rows PublishInOrder sends as one fast batch. One row
// at a time, each after the ack of the one before, a row costs the process
// about 66 µs of CPU with the embedded server (the publish, the server's
// store, its ack, the callback that sends the next); as a fast batch of 12
// rows 36 µs, of 29 rows 28 µs (BenchmarkPublishInOrderOneRoom), of 4 rows
// about 100 µs (a batch pays for its own reply subscription and two round
// trips). A busy room's commits hand the relay dozens of rows at once.
const minRun = 12

// maxRun is the most rows one fast batch carries: the broker acknowledges
// every hundredth, and a sequence's caller hears of its rows (each) run by
// run.
const maxRun = 256

// publishRun publishes rows as one JetStream fast batch ("fast ingest",
// NATS 2.14): the broker stores them in order as they come, acknowledges the
// first, then every hundredth, then the commit, and stops storing at the
// first gap, so what it holds of a run is always its first rows. A
// duplicate inside the window is acknowledged as such without being stored
// again, as a Publish of it would be. It returns how many rows the broker
// is known to hold: all of them, or on a failure the rows up to its last
// acknowledgement (the rows after them may be stored too; publishing them
// again stores nothing twice within the window, and keeps the order, since
// they follow the run on the same connection).
func (b *Bus) publishRun(ctx context.Context, rows []outbox.Record, each func(i int) bool) (int, error) {
	// No stall for acknowledgements inside a run (at most maxRun rows, the
	// broker acknowledges at least every flow-th): a publisher that stalls
	// and times out keeps its reply subscription.
	fp, err := jetstreamext.NewFastPublisher(b.order.js, jetstreamext.FastPublishFlowControl{
		AckTimeout: b.cfg.PublishTimeout, MaxOutstandingAcks: maxRun})
	if err != nil {
		return 0, publishErr(rows[0], err)
	}
	held := 0
	fail := func(err error) (int, error) {
		b.abandon(fp)
		for i := range held {
			each(i)
		}
		return held, err
	}
	for i := range rows {
		msg, err := b.message(rows[i])
		if err != nil {
			return fail(fmt.Errorf("publish: %w", err))
		}
		if i < len(rows)-1 {
			ack, err := fp.AddMsg(msg)
			if err != nil {
				return fail(publishErr(rows[held], b.connErr(err)))
			}
			held = int(ack.AckSequence)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
		ack, err := fp.CommitMsg(cctx, msg)
		cancel()
		if err != nil {
			return fail(publishErr(rows[held], b.connErr(err)))
		}
		if ack.BatchSize != uint64(len(rows)) {
			return fail(publishErr(rows[held], fmt.Errorf("fast batch of %d rows acknowledged as %d", len(rows), ack.BatchSize)))
		}
	}
	b.runsSent.Add(1)
	for i := range rows {
		each(i)
	}
	return len(rows), nil
}

// abandon ends a run that failed before its commit: the broker drops what
// it did not store when the run goes quiet, and the run's reply
// subscription goes.
func (b *Bus) abandon(fp jetstreamext.FastPublisher) {
	if fp.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.PublishTimeout)
	defer cancel()
	_, _ = fp.Close(ctx)
}
