// Package outbox holds the durable room facts that leave room-service through
// the room_outbox table: the row every storage implementation reads and
// writes, and the words the relay (outbox/relay) and the brokers share.
package outbox

import (
	"errors"
	"strconv"
	"time"
)

// ErrTransient marks a publish that failed because of the broker or the
// connection, not the message. The relay then pauses as a whole and counts
// no attempt against the row, so an outage of any length sends nothing dead.
var ErrTransient = errors.New("broker unavailable")

// Status of an outbox row.
const (
	StatusPending   = "pending"
	StatusPublished = "published"
	StatusDead      = "dead"
)

// Record is one row of room_outbox: a durable fact committed in the same
// transaction as the command that caused it.
type Record struct {
	// ID is the auto-increment key, set by the repository on insert.
	ID int64
	// EventID is the unique, deterministic dedup key downstream ("room/version/seq").
	EventID string
	// RoomID is the partition key: events of one room are delivered in order.
	RoomID string
	// RoomVersion is the version of the command that produced the event.
	RoomVersion int64
	// Seq orders events within one command, from 0.
	Seq int32
	// EventType is the event's name, such as "RoomMicChanged".
	EventType string
	// Payload is the JSON encoding of the event.
	Payload []byte
	// OwnerEpoch is the epoch of the owner that committed the row (forensics).
	OwnerEpoch int64
	// Status is one of StatusPending, StatusPublished, StatusDead.
	Status string
	// Attempts counts failed deliveries.
	Attempts int32
	// LastError is the most recent delivery error.
	LastError string
	// NextAttemptAt is the earliest time the relay retries a failed row.
	NextAttemptAt time.Time
	// CreatedAt is the commit time; PublishedAt is set when the broker acknowledged.
	CreatedAt   time.Time
	PublishedAt time.Time
	// TraceContext is the W3C traceparent of the command that wrote the
	// row, "" when it was not traced: the publish joins that trace, and
	// the message carries it on to consumers.
	TraceContext string
}

// EventID is the dedup key of a room's event: "room/version/seq".
func EventID(roomID string, version int64, seq int32) string {
	var buf [96]byte
	b := append(buf[:0], roomID...)
	b = append(b, '/')
	b = strconv.AppendInt(b, version, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(seq), 10)
	return string(b)
}
