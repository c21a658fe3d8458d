package cell

import (
	"context"
	"time"

	"hyapp/room-service/store"
)

// Store is what the engine needs from storage: claiming a room, reading it
// back, committing its batches, and durable timers. Implementations are
// safe for concurrent use and report the errors of store.Repository
// (ErrNotFound, ErrConflict, ErrFenced, ErrUnavailable), whose methods of
// the same names these are.
type Store interface {
	Log
	// ClaimRoom makes nodeID the room's owner and returns the new owner epoch and the durable head.
	ClaimRoom(ctx context.Context, roomID string, nodeID string) (store.Claim, error)
	// StopRooms records rooms' clean stops, many in one transaction: final
	// snapshots, and releases by the owners at their epochs.
	StopRooms(ctx context.Context, stops []store.RoomStop) error
	// GetRoomMeta reads a room's metadata; found is false when the room does not exist.
	GetRoomMeta(ctx context.Context, roomID string) (store.RoomMeta, bool, error)
	// RoomOwnerEpoch reads the room's owner epoch; found is false when the room does not exist.
	RoomOwnerEpoch(ctx context.Context, roomID string) (epoch int64, found bool, err error)
	// GetCommands reads the committed commands among commandIDs, keyed by command id.
	GetCommands(ctx context.Context, roomID string, commandIDs []string) (map[string]store.CommandRecord, error)
	// CommitBatches commits the batches in one transaction, each fenced on its own.
	CommitBatches(ctx context.Context, batches []store.Batch) (results []error, err error)
	// ListDueTimers returns up to limit timers of kind due at before, of every room, oldest first.
	ListDueTimers(ctx context.Context, kind string, before time.Time, limit int) ([]store.Timer, error)
	// DeleteTimers deletes the room's timers named by timerIDs (those due by
	// dueBy, when it is not zero), outside any batch.
	DeleteTimers(ctx context.Context, roomID string, timerIDs []string, dueBy time.Time) error
	// PutTimers sets timers outside any batch.
	PutTimers(ctx context.Context, timers []store.Timer) error
}

// Log is what recovery reads: a room's stored snapshot and its command log.
type Log interface {
	// GetLatestSnapshot reads the room's snapshot; found is false when there is none.
	GetLatestSnapshot(ctx context.Context, roomID string) (store.SnapshotRecord, bool, error)
	// ListCommandsAfter returns the room's commands with RoomVersion > roomVersion in version order.
	ListCommandsAfter(ctx context.Context, roomID string, roomVersion int64) ([]store.CommandRecord, error)
}

// The storage contract serves the engine.
var _ Store = store.Repository(nil)
