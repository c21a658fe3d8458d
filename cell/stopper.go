package cell

import (
	"context"
	"sync"

	"hyapp/room-service/store"
)

// stopper writes stopping cells' final snapshots and releases, the stops
// of many rooms in one transaction (StopRooms). A node that stops with
// thousands of rooms loaded would otherwise write them one transaction
// each, one after another on SQLite's single writer, while the last rooms'
// next owners wait. One stop alone goes at once; when a transaction
// fails, its rooms are written one by one.
type stopper struct {
	store    roomStopper
	in       chan *stopReq
	maxRooms int
	quit     chan struct{}
	wg       sync.WaitGroup
}

// roomStopper writes rooms' stops: Store's StopRooms.
type roomStopper interface {
	StopRooms(ctx context.Context, stops []store.RoomStop) error
}

type stopReq struct {
	stop store.RoomStop
	done chan error
}

// newStopper starts workers that write until close; ctx bounds their
// writes (the registry's: cancelled when a drain runs out of time).
func newStopper(ctx context.Context, st roomStopper, workers, maxRooms int) *stopper {
	s := &stopper{store: st, in: make(chan *stopReq, maxRooms), maxRooms: maxRooms, quit: make(chan struct{})}
	for range workers {
		s.wg.Go(func() { s.work(ctx) })
	}
	return s
}

// stop writes st, with the stops queued beside it, and returns the outcome.
func (s *stopper) stop(st store.RoomStop) error {
	req := &stopReq{stop: st, done: make(chan error, 1)}
	select {
	case s.in <- req:
	case <-s.quit:
		return store.ErrUnavailable
	}
	return <-req.done
}

func (s *stopper) work(ctx context.Context) {
	reqs := make([]*stopReq, 0, s.maxRooms)
	stops := make([]store.RoomStop, 0, s.maxRooms)
	for {
		select {
		case <-s.quit:
			return
		case first := <-s.in:
			reqs, stops = append(reqs[:0], first), append(stops[:0], first.stop)
		more:
			for len(reqs) < s.maxRooms {
				select {
				case r := <-s.in:
					reqs, stops = append(reqs, r), append(stops, r.stop)
				default:
					break more
				}
			}
			err := s.store.StopRooms(ctx, stops)
			for i, r := range reqs {
				if err != nil && len(stops) > 1 && ctx.Err() == nil {
					// Each room on its own, so one that cannot be
					// written does not turn the others' clean stops
					// into failovers.
					r.done <- s.store.StopRooms(ctx, stops[i:i+1])
					continue
				}
				r.done <- err
			}
			clear(reqs) // drop references to payloads
			clear(stops)
		}
	}
}

// close stops the workers once every cell has stopped.
func (s *stopper) close() {
	close(s.quit)
	s.wg.Wait()
}
