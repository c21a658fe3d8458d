// Package store defines room-service's persistence boundary: the Repository
// contract every storage implementation satisfies (SQLite, MySQL), and the
// errors it reports. Implementations live in subpackages; storetest holds the
// one contract suite they all run.
package store

import (
	"context"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/room"
)

// RoomMeta is a room's durable metadata (table rooms).
type RoomMeta struct {
	// RoomID is the primary key, and the partition key for recovery and lease routing.
	RoomID string
	// OwnerUserID is the room owner; with HostUserID it rebuilds the admin set when there is no snapshot.
	OwnerUserID int64
	// HostUserID is the host; it rebuilds the admin set when there is no snapshot.
	HostUserID int64
	// SeatCount is the initial number of mic seats, needed only to rebuild without a snapshot.
	SeatCount int32
	// Mode is the room mode, persisted metadata.
	Mode string
	// Status restores State.Status when there is no snapshot.
	Status string
}

// CommandRecord is one successful command in room_command_log.
type CommandRecord struct {
	// RoomID is the room the command belongs to.
	RoomID string
	// RoomVersion is the room version after the command applied; replay follows it.
	RoomVersion int64
	// CommandID is the idempotency key, unique within the room.
	CommandID string
	// CommandType selects the payload decoder.
	CommandType string
	// Payload is the JSON-encoded command.
	Payload []byte
	// Replayable says whether recovery replays the command.
	Replayable bool
	// CreatedAt is when the command was durably written.
	CreatedAt time.Time
}

// SnapshotRecord is the latest snapshot of a room (table room_snapshots).
type SnapshotRecord struct {
	// RoomID is the room the snapshot belongs to.
	RoomID string
	// RoomVersion is the version the snapshot covers.
	RoomVersion int64
	// Payload is a protobuf-encoded roomv1.RoomSnapshot.
	Payload []byte
	// CreatedAt is when the snapshot was made.
	CreatedAt time.Time
}

// Claim is what a node learns when it takes a room: its fencing epoch and
// the room's durable head.
type Claim struct {
	// Epoch is the new owner epoch; every later commit must present it.
	Epoch int64
	// HeadVersion is the version of the last committed command (0: none yet).
	HeadVersion int64
	// Meta is the room's metadata.
	Meta RoomMeta
	// PreviousNode is the node that held the room before this claim and
	// did not release it (StopRooms): a node that crashed, froze or was
	// cut off. Empty when the room is claimed for the first time or was
	// released cleanly (an idle unload, a hand-off).
	PreviousNode string
}

// RoomStop is a room's clean stop (StopRooms).
type RoomStop struct {
	RoomID string
	// Snapshot, when set, is the room's final snapshot.
	Snapshot *SnapshotRecord
	// Release records that the owner at Epoch stopped serving the room.
	Release bool
	Epoch   int64
}

// RoomInfo is one row of a room listing.
type RoomInfo struct {
	Meta        RoomMeta
	HeadVersion int64
	OwnerEpoch  int64
	OwnerNode   string
	UpdatedAt   time.Time
}

// OutboxStats is what operators see of the outbox.
type OutboxStats struct {
	// Pending counts the rows still to deliver, due or not.
	Pending int64
	// OldestPending is the CreatedAt of the oldest pending row; zero when nothing is pending.
	OldestPending time.Time
	// Dead counts dead rows by event type. A type without dead rows has no entry; never nil.
	Dead map[string]int64
	// Published counts published rows still kept (retention deletes them
	// later), up to the count asked for.
	Published int64
	// PublishedMore says the count stopped at the number asked for: more
	// published rows are kept than Published says.
	PublishedMore bool
}

// Timer is a durable wakeup: a row committed in the same transaction as the
// command that set it (table room_timers). A node that crashes before the
// wakeup loses nothing: a scanner finds the row once it is due.
type Timer struct {
	// RoomID is the room the timer belongs to.
	RoomID string
	// TimerID names the timer, unique within the room ("rocket/<rocket_id>").
	TimerID string
	// Kind selects what firing means ("rocket_launch").
	Kind string
	// FireAt is when the timer is due, stored to the millisecond; zero means
	// the commit's time (due at once).
	FireAt time.Time
	// Payload is what the firing needs, encoded by whoever set the timer.
	Payload []byte
	// CreatedAt is when the timer was set; zero means the commit's time.
	CreatedAt time.Time
}

// Batch is the unit of an atomic, fenced commit for one room: consecutive
// commands with the outbox rows they produced and, optionally, a snapshot.
type Batch struct {
	// RoomID names the room.
	RoomID string
	// OwnerEpoch must equal rooms.owner_epoch or the batch is fenced.
	OwnerEpoch int64
	// BaseVersion must equal rooms.room_version (the head before the batch) or the batch is fenced.
	BaseVersion int64
	// Commands hold versions BaseVersion+1 .. BaseVersion+len(Commands), in order.
	Commands []CommandRecord
	// Outbox holds the durable facts of these commands.
	Outbox []outbox.Record
	// Snapshot, when set, replaces the room's snapshot unless a newer one is stored.
	Snapshot *SnapshotRecord
	// Status, when set, becomes rooms.status (so a rebuild without snapshot sees a closed room).
	Status string
	// Charges are gift charges of the embedded COIN ledger (tables
	// wallet_*, in this same database) that this transaction makes, in
	// order: the charges of the gifts the batch commits, written settled.
	// Each was decided on the balance its sender had when the room
	// prepared it; a key charged before, or a balance that has moved
	// since, makes the batch write nothing, ErrConflict.
	Charges []GiftCharge
	// Settle holds charge keys of the embedded ledger to settle in this
	// transaction: pending charges made before (by Wallet.Charge) of
	// gifts the batch commits. Each must be pending and becomes settled; a
	// key that is not pending (refunded, unknown) makes the batch write
	// nothing, ErrConflict.
	Settle []string
	// Meta, when set, replaces the room's owner, host, seat count and mode.
	// The batch holding CreateRoom sets it, so the row always matches the
	// command that created the room.
	Meta *RoomMeta
	// CreatedBy, when set, makes this the batch that creates its room, on
	// node CreatedBy: the room has no row yet, and the commit inserts it
	// (Meta's fields, owner epoch OwnerEpoch, owner node CreatedBy) before
	// fencing the batch. A room that already has a row makes the batch, and
	// every later batch of the room in the same call, store.ErrFenced, with
	// nothing written. It needs Meta and a BaseVersion of 0.
	CreatedBy string
	// Timers are set with the batch: each replaces a timer of the same id in
	// the room. A batch that is fenced or refused sets none.
	Timers []Timer
	// DoneTimers are ids of the room's timers deleted with the batch, before
	// its Timers are set; ids the room does not hold are ignored.
	DoneTimers []string
	// Gifts are the gift records of the gifts the batch commits (their
	// RecordID is assigned on insert).
	Gifts []GiftRecord
	// Roles, when set, replaces the room's owner and host after its Meta
	// (TransferOwnership, SetHost), so the room's row names them as its
	// state does.
	Roles *RoomRoles
}

// GiftCharge is one gift's charge made inside a room's commit
// (Batch.Charges): UserID pays Amount and is credited Reward, from a
// balance of BalanceAfter+Amount-Reward to BalanceAfter.
type GiftCharge struct {
	Key          string // wallet.ChargeKey(room_id, command_id)
	UserID       int64
	Amount       int64
	Reward       int64
	MultiplierBP int64
	BalanceAfter int64
	AtMs         int64
}

// RoomRoles are a room's owner and host.
type RoomRoles struct {
	OwnerUserID int64
	HostUserID  int64
}

// HeadVersion is the room version after the batch.
func (b *Batch) HeadVersion() int64 { return b.BaseVersion + int64(len(b.Commands)) }

// Errors reported by every Repository implementation. Driver errors stop at
// the adapter: callers see only these (wrapped with ids) or ErrUnavailable.
var (
	// ErrNotFound: the room (or row) does not exist.
	ErrNotFound = room.ErrRoomNotFound
	// ErrConflict: a unique key or an expected version was violated.
	ErrConflict = &room.Error{Code: room.CodeConflict, Reason: "storage_conflict", Message: "a unique key or expected version was violated"}
	// ErrFenced: the batch's owner epoch or base version is not the room's; the caller lost the room.
	ErrFenced = room.ErrFenced
	// ErrUnavailable: the database could not be reached or the outcome is unknown.
	ErrUnavailable = room.ErrUnavailable
)

// Repository is the whole persistence boundary of room-service. The first
// twelve methods are the original contract; the rest are what a fenced,
// batched commit path, the outbox relay, durable timers and operators need.
//
// Implementations are safe for concurrent use. A room's durable head
// (rooms.room_version) and owner epoch (rooms.owner_epoch) advance only
// through CommitBatches, SaveCommand and ClaimRoom.
type Repository interface {
	// SaveRoomMeta stores a room's metadata; it must exist before the room's first command.
	// It inserts, or replaces the metadata of a room that has no command yet;
	// a room with commands returns ErrConflict.
	SaveRoomMeta(ctx context.Context, meta RoomMeta) error
	// GetRoomMeta reads a room's metadata; found is false when the room does not exist.
	GetRoomMeta(ctx context.Context, roomID string) (RoomMeta, bool, error)
	// RoomOwnerEpoch reads the room's owner epoch, which each ClaimRoom
	// raises; found is false when the room does not exist.
	RoomOwnerEpoch(ctx context.Context, roomID string) (epoch int64, found bool, err error)
	// GetCommand reads a committed command, for idempotent retries and command_id conflicts.
	GetCommand(ctx context.Context, roomID string, commandID string) (CommandRecord, bool, error)
	// SaveCommand appends one command outside any batch. It must be the room's
	// next version (head+1); otherwise, or on a duplicate command_id, ErrConflict.
	// It advances the head but checks no owner epoch: the cell commits through CommitBatches.
	SaveCommand(ctx context.Context, record CommandRecord) error
	// ListCommandsAfter returns the room's commands with RoomVersion > roomVersion in version order.
	ListCommandsAfter(ctx context.Context, roomID string, roomVersion int64) ([]CommandRecord, error)
	// ListCommandsPage returns at most limit of the room's commands with
	// RoomVersion > roomVersion in version order, read with the limit in
	// the query, and the room's head version, read after them (0 for an
	// unknown room).
	ListCommandsPage(ctx context.Context, roomID string, roomVersion int64, limit int) ([]CommandRecord, int64, error)
	// SaveSnapshot stores a snapshot unless one with the same or a higher
	// version is stored (an older snapshot is ignored, never an error).
	SaveSnapshot(ctx context.Context, snapshot SnapshotRecord) error
	// GetLatestSnapshot reads the room's snapshot; found is false when there is none.
	GetLatestSnapshot(ctx context.Context, roomID string) (SnapshotRecord, bool, error)
	// SaveOutbox inserts outbox rows as pending. A duplicate event_id is ErrConflict.
	// The cell never uses it alone: outbox rows share the command's commit (CommitBatches).
	SaveOutbox(ctx context.Context, records []outbox.Record) error
	// MarkOutboxPublished marks a row published. Marking a published row again is a no-op.
	// It publishes a dead row too: the broker has it once it acknowledged, whatever the row's
	// state (the relay never calls it for a dead row). Unknown id: ErrNotFound.
	MarkOutboxPublished(ctx context.Context, eventID string) error
	// MarkOutboxFailed records one failed delivery (attempts+1, last error) and keeps the row pending.
	MarkOutboxFailed(ctx context.Context, eventID string, lastErr string) error

	// ClaimRoom makes nodeID the room's owner: it increments rooms.owner_epoch
	// and returns the new epoch with the durable head. ErrNotFound when the room has no metadata.
	ClaimRoom(ctx context.Context, roomID string, nodeID string) (Claim, error)
	// StopRooms records the clean stops of rooms, in one transaction: each
	// one's final snapshot, stored as SaveSnapshot stores it, and, when it
	// releases the room, that its owner at its epoch stopped serving it:
	// the next claim's PreviousNode is empty. A release changes nothing
	// once another node claimed the room (a higher epoch), and is not an
	// error then.
	StopRooms(ctx context.Context, stops []RoomStop) error
	// CommitBatches commits the batches in one transaction. Each batch is fenced
	// on its own: if the room's owner epoch or head version differs, that batch
	// writes nothing and its slot in results is ErrFenced; a batch holding a
	// command id or event id that is already stored writes nothing and its
	// slot is ErrConflict; the others commit. Consecutive batches of one room
	// in one call see each other.
	// A non-nil err means no batch is known to be committed (outcome unknown):
	// callers must reload the rooms involved.
	CommitBatches(ctx context.Context, batches []Batch) (results []error, err error)
	// GetCommands reads the committed commands among commandIDs, keyed by command id.
	GetCommands(ctx context.Context, roomID string, commandIDs []string) (map[string]CommandRecord, error)
	// ListRooms lists rooms ordered by id, starting after afterRoomID, at most limit.
	ListRooms(ctx context.Context, afterRoomID string, limit int) ([]RoomInfo, error)
	// PruneCommands deletes up to limit command log rows that no recovery
	// needs: rows at least keepVersions versions below their room's stored
	// snapshot and written before before. It returns the rows deleted; callers
	// repeat until it returns fewer than limit. The log is also the
	// idempotency record, so the window bounds how late a retry is recognised.
	PruneCommands(ctx context.Context, keepVersions int64, before time.Time, limit int) (int, error)
	// PruneOutbox deletes up to limit published outbox rows published before
	// before, returning the rows deleted. Pending and dead rows are never deleted.
	PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error)

	// ListOutboxHeads returns, for each room with pending rows, its first pending row (the lowest
	// id), whatever its NextAttemptAt, for up to limit rooms whose first row's id is above afterID,
	// in id order. It costs what is pending, read from the pending index, and hands over one row
	// a room, however long the rooms' backlogs are: the relay's scan for rooms with work.
	// A limit of zero or less lists nothing.
	ListOutboxHeads(ctx context.Context, afterID int64, limit int) ([]outbox.Record, error)
	// ListRoomOutbox returns up to limit pending rows of one room in (room_version, seq) order.
	// It reads the room's pending rows only, however much published history the room keeps.
	// A limit of zero or less lists nothing.
	ListRoomOutbox(ctx context.Context, roomID string, limit int) ([]outbox.Record, error)
	// MarkOutboxPublishedBatch marks the rows published (published_at = now) in one statement
	// per chunk; ids that are already published or unknown are ignored. A dead row among them
	// is published, as MarkOutboxPublished does. Chunks commit on their own: after an error
	// some rows may be published, and calling again with the same ids is safe.
	MarkOutboxPublishedBatch(ctx context.Context, eventIDs []string) error
	// FailOutbox records one failed delivery: attempts+1, last_error, next_attempt_at = next;
	// when attempts reaches maxAttempts the row becomes dead instead. It reports whether the row
	// is dead now. Unknown id: ErrNotFound. A row that is not pending is left alone (dead=false, nil).
	// A zero next is due at once; a maxAttempts of zero or less never makes a row dead.
	// Concurrent calls on one row each count once.
	FailOutbox(ctx context.Context, eventID string, lastErr string, next time.Time, maxAttempts int32) (dead bool, err error)
	// OutboxStats summarises the outbox. Its numbers are read from one snapshot.
	// It reads the pending and dead rows, and counts the published rows retention
	// keeps up to countPublished (PublishedMore when more are kept): each one
	// counted is an index entry read, and 72 hours of them may be many millions.
	// With countPublished zero or less it counts none: it then costs what waits
	// to go out, not what retention keeps, as gauges read every few seconds must.
	OutboxStats(ctx context.Context, countPublished int64) (OutboxStats, error)
	// ListDueTimers returns up to limit timers with FireAt at or before before,
	// oldest FireAt first, of every room. A limit of zero or less lists nothing.
	// Timers are set and deleted with batches (Batch.Timers, Batch.DoneTimers)
	// and by DeleteTimers.
	// Kind, when not empty, lists that kind alone, so that a kind whose rows
	// stay due holds back no other.
	ListDueTimers(ctx context.Context, kind string, before time.Time, limit int) ([]Timer, error)
	// DeleteTimers deletes the room's timers named by timerIDs, outside any
	// batch; ids the room does not hold are ignored. A non-zero dueBy
	// deletes only those due by then: one set again since it was found due
	// (a later FireAt) stays. It checks no owner epoch: callers delete only
	// timers that can no longer do anything.
	DeleteTimers(ctx context.Context, roomID string, timerIDs []string, dueBy time.Time) error
	// PutTimers sets timers outside any batch, each replacing the one of
	// its room and id. It checks no owner epoch: callers set only timers
	// whose firing early, late or once too often does no harm.
	PutTimers(ctx context.Context, timers []Timer) error
	// RequeueDeadOutbox makes dead rows pending again (attempts 0, due now), all of them or only
	// those of eventType when it is not empty, and returns how many. A row keeps its last error
	// until its next failure. Rows are requeued in chunks that commit on their own.
	RequeueDeadOutbox(ctx context.Context, eventType string) (int, error)
	// Close releases the repository's connections.
	Close() error
}
