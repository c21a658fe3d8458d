package cell

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// DirectoryStore is what the room directory's projector writes to.
type DirectoryStore interface {
	// UpsertDirectory writes rows in one transaction, each unless the
	// stored row of its room is newer (store.DirectoryRow's fence).
	UpsertDirectory(ctx context.Context, rows []store.DirectoryRow) error
}

// Directory projects the rooms this node owns into the room directory (the
// lobby's hot list): each time a room's committed state changes it keeps
// the room's row in memory, the latest replacing the one before, and Run
// writes the rows gathered every interval in one transaction. A room's row
// is what its state says at its committed head, so no event needs
// folding: presence, gifts and profile changes reach it alike. Rows carry
// the owner epoch: a node that lost a room cannot overwrite the next
// owner's row. A write that fails keeps its rows for the next one, unless
// a newer row of the room replaced them.
//
// Its feature's hook runs on rooms' goroutines and only takes a lock to
// store the row: it never waits on the database.
type Directory struct {
	store DirectoryStore
	node  string
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	pending map[string]store.DirectoryRow
}

// NewDirectory returns a projector that writes to st every interval
// (default 1 s), naming node as the rows' writer.
func NewDirectory(st DirectoryStore, node string, every time.Duration, log *slog.Logger) *Directory {
	if every <= 0 {
		every = time.Second
	}
	return &Directory{store: st, node: node, every: every, log: log,
		pending: make(map[string]store.DirectoryRow)}
}

// Feature returns the hook that feeds the projector (Config.Features).
func (d *Directory) Feature() Feature { return Feature{Settled: d.settled} }

func (d *Directory) settled(s *room.State, epoch int64) {
	if s.Status == room.StatusCreating {
		return
	}
	row := DirectoryRowOf(s, epoch, d.node)
	d.mu.Lock()
	d.pending[row.RoomID] = row
	d.mu.Unlock()
}

// DirectoryRowOf is a room's directory row at its state.
func DirectoryRowOf(s *room.State, epoch int64, node string) store.DirectoryRow {
	taken := int32(0)
	for _, seat := range s.Seats {
		if seat.UserID != 0 {
			taken++
		}
	}
	return store.DirectoryRow{
		RoomID: s.RoomID, OwnerEpoch: epoch, RoomVersion: s.Version, OwnerNode: node, Status: string(s.Status),
		OwnerUserID: s.OwnerUserID, HostUserID: s.HostUserID, SeatCount: int32(len(s.Seats)), Mode: s.Mode, Region: s.Region,
		Title: s.Profile.Title, CoverURL: s.Profile.CoverURL, OnlineCount: int32(len(s.Members)), SeatsTaken: taken,
		Heat: s.Economy.Heat, CreatedAt: s.CreatedAt, LastActiveAt: s.LastAt,
	}
}

// Run writes the gathered rows every interval until ctx ends, then once
// more with a short deadline, so a clean stop leaves the rows current.
func (d *Directory) Run(ctx context.Context) {
	t := time.NewTimer(d.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := d.Flush(final); err != nil {
				d.log.Warn("room directory: final write", "err", err)
			}
			return
		case <-t.C:
		}
		if err := d.Flush(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("room directory: write; the rows are kept for the next one", "err", err)
		}
		t.Reset(d.every)
	}
}

// Flush writes the gathered rows now, in one transaction.
func (d *Directory) Flush(ctx context.Context) error {
	d.mu.Lock()
	if len(d.pending) == 0 {
		d.mu.Unlock()
		return nil
	}
	rows := make([]store.DirectoryRow, 0, len(d.pending))
	for _, r := range d.pending {
		rows = append(rows, r)
	}
	clear(d.pending)
	d.mu.Unlock()
	err := d.store.UpsertDirectory(ctx, rows)
	if err != nil {
		d.mu.Lock()
		for _, r := range rows {
			if _, newer := d.pending[r.RoomID]; !newer {
				d.pending[r.RoomID] = r
			}
		}
		d.mu.Unlock()
	}
	return err
}

// DirectoryBackfill is what Backfill reads and writes.
type DirectoryBackfill interface {
	Log
	// GetRoomMeta reads a room's metadata; found is false when the room does not exist.
	GetRoomMeta(ctx context.Context, roomID string) (store.RoomMeta, bool, error)
	// MissingDirectory returns up to limit ids of rooms with commands and no directory row, after afterRoomID.
	MissingDirectory(ctx context.Context, afterRoomID string, limit int) ([]string, error)
	// InsertDirectoryIfMissing writes rows of rooms that have none.
	InsertDirectoryIfMissing(ctx context.Context, rows []store.DirectoryRow) error
}

// Backfill writes a directory row for every room that has none (rooms
// created before the directory existed, or not loaded since): each is
// rebuilt from its snapshot and log, as recovery does, and written with
// owner epoch 0 only where no row is, so any owner's row replaces it and
// it never replaces one. It returns the rows written.
func Backfill(ctx context.Context, st DirectoryBackfill) (int, error) {
	const page = 100
	written, after := 0, ""
	for {
		ids, err := st.MissingDirectory(ctx, after, page)
		if err != nil || len(ids) == 0 {
			return written, err
		}
		rows := make([]store.DirectoryRow, 0, len(ids))
		for _, id := range ids {
			meta, found, err := st.GetRoomMeta(ctx, id)
			if err != nil {
				return written, err
			}
			if !found {
				continue
			}
			rec, err := Recover(ctx, st, meta)
			if err != nil {
				return written, err
			}
			if rec.State.Status != room.StatusCreating {
				rows = append(rows, DirectoryRowOf(rec.State, 0, ""))
			}
		}
		if err := st.InsertDirectoryIfMissing(ctx, rows); err != nil {
			return written, err
		}
		written += len(rows)
		after = ids[len(ids)-1]
	}
}
