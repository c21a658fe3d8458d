package room

import (
	"errors"
	"fmt"
)

// Code is the small closed set of error classes. Transports map each code to
// their own status in exactly one place (see package rpc).
type Code string

// The error codes. Keep this set small: clients switch on Reason, operators on Code.
const (
	CodeInvalid       Code = "invalid"       // the request itself is malformed
	CodeNotFound      Code = "not_found"     // the room (or another named thing) does not exist
	CodeConflict      Code = "conflict"      // the request clashes with existing state (ids, versions)
	CodeRejected      Code = "rejected"      // a domain rule refuses the command in the current state
	CodePermission    Code = "permission"    // the operator may not do this
	CodeUnauthorized  Code = "unauthorized"  // the caller is not authenticated
	CodeExhausted     Code = "exhausted"     // a bounded queue is full; retry later
	CodeUnavailable   Code = "unavailable"   // a dependency is down or the room moved; retry later
	CodeInternal      Code = "internal"      // a bug; logged with the room id
	CodeUnimplemented Code = "unimplemented" // no such procedure on this service
)

// Error is the one application error type. Reason is a stable snake_case
// string that clients switch on; Message is for humans and may change.
type Error struct {
	Code    Code
	Reason  string
	Message string
	// Metadata are facts a client acts on (the balance and the amount
	// needed of insufficient_balance), sent as the ErrorInfo's metadata.
	// Keys are stable like the reason; nil for most errors.
	Metadata map[string]string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Reason
	}
	return e.Reason + ": " + e.Message
}

// Is makes errors.Is match on Reason, so a detailed copy made by Errorf still
// matches the sentinel it was built from.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// Errorf returns a copy of the sentinel with a detailed message.
func Errorf(sentinel *Error, format string, args ...any) *Error {
	return &Error{Code: sentinel.Code, Reason: sentinel.Reason, Message: fmt.Sprintf(format, args...)}
}

// AsError finds the *Error in err's chain. Anything else is reported as an
// internal error, so no driver or runtime error text decides a client's path.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Reason: "internal", Message: err.Error()}
}

func sentinel(code Code, reason, msg string) *Error {
	return &Error{Code: code, Reason: reason, Message: msg}
}

// Domain and service errors, declared together. Reasons are part of the API.
var (
	// Request shape.
	ErrInvalidArgument = sentinel(CodeInvalid, "invalid_argument", "the request is malformed")
	// ErrMalformedRequest: the body does not decode as the request message:
	// bad JSON or protobuf, a value of the wrong type or out of its field's
	// range, invalid UTF-8, an unknown enum name, or a field the message does
	// not have (unknown fields are refused, not ignored; see package rpc).
	ErrMalformedRequest  = sentinel(CodeInvalid, "malformed_request", "the request body does not decode as the request message")
	ErrUnknownProcedure  = sentinel(CodeUnimplemented, "unknown_procedure", "this service has no such procedure")
	ErrMissingCommandID  = sentinel(CodeInvalid, "missing_command_id", "command_id is required")
	ErrMissingRoomID     = sentinel(CodeInvalid, "missing_room_id", "room_id is required")
	ErrMissingOperator   = sentinel(CodeInvalid, "missing_operator", "operator_user_id is required")
	ErrFieldTooLong      = sentinel(CodeInvalid, "field_too_long", "a field is longer than allowed")
	ErrBadSeatIndex      = sentinel(CodeInvalid, "bad_seat_index", "no such seat")
	ErrBadSeatCount      = sentinel(CodeInvalid, "bad_seat_count", "seat_count is outside the allowed range")
	ErrBadDuration       = sentinel(CodeInvalid, "bad_duration", "duration is outside the allowed range")
	ErrBadTime           = sentinel(CodeInvalid, "bad_time", "the command time is outside the allowed range")
	ErrBadTarget         = sentinel(CodeInvalid, "bad_target", "target_user_id is required and may not be the operator")
	ErrUnknownCommand    = sentinel(CodeInvalid, "unknown_command", "unknown command type")
	ErrCommandIDConflict = sentinel(CodeConflict, "command_id_conflict", "command_id was already used for a different request")
	// ErrReservedCommandID: the command_id starts with a prefix the service
	// keeps for the commands it issues itself (see CheckOrigin).
	ErrReservedCommandID = sentinel(CodeInvalid, "reserved_command_id", "command_id starts with a prefix the service keeps for its own commands")
	// ErrReservedOperator: operator_user_id is SystemOperator, the operator
	// of the commands the service issues itself.
	ErrReservedOperator = sentinel(CodeInvalid, "reserved_operator", "operator_user_id is the service's own and no user's")
	// ErrIdempotencyKeyConflict: an idempotency_key (CreditCoins) was used
	// before with another user or amount; nothing changed.
	ErrIdempotencyKeyConflict = sentinel(CodeConflict, "idempotency_key_conflict", "idempotency_key was already used for a different request")

	// Room lifecycle.
	ErrRoomNotFound = sentinel(CodeNotFound, "room_not_found", "no such room")
	ErrRoomExists   = sentinel(CodeConflict, "room_exists", "the room already exists")
	ErrRoomClosed   = sentinel(CodeRejected, "room_closed", "the room is closed")
	ErrRoomNotOpen  = sentinel(CodeRejected, "room_not_created", "the room has not been created yet")

	// Membership and moderation.
	ErrNotInRoom       = sentinel(CodeRejected, "not_in_room", "the user is not in the room")
	ErrBanned          = sentinel(CodeRejected, "user_banned", "the user is banned from the room")
	ErrNotBanned       = sentinel(CodeRejected, "not_banned", "the user is not banned")
	ErrPermission      = sentinel(CodePermission, "permission_denied", "the operator may not do this")
	ErrTargetProtected = sentinel(CodePermission, "target_protected", "the room owner cannot be kicked, muted or demoted")
	ErrNoChange        = sentinel(CodeRejected, "no_change", "the command would change nothing")

	// Seats.
	ErrSeatOccupied  = sentinel(CodeRejected, "seat_occupied", "the seat is taken")
	ErrSeatLocked    = sentinel(CodeRejected, "seat_locked", "the seat is locked")
	ErrSeatMuted     = sentinel(CodeRejected, "seat_muted", "an admin muted this seat")
	ErrNotOnMic      = sentinel(CodeRejected, "not_on_mic", "the user is not on a seat")
	ErrAlreadyOnMic  = sentinel(CodeRejected, "already_on_mic", "the user already sits on a seat")
	ErrRoomFull      = sentinel(CodeRejected, "room_full", "the room holds as many members as it may")
	ErrTooManyAdmins = sentinel(CodeRejected, "too_many_admins", "the room has as many admins as it may")
	ErrTooManyBans   = sentinel(CodeRejected, "too_many_restrictions", "the room holds as many bans or chat mutes as it may")

	// Gifts and the rocket.
	ErrUnknownGift         = sentinel(CodeInvalid, "unknown_gift", "no such gift in the catalogue")
	ErrCountNotAllowed     = sentinel(CodeInvalid, "count_not_allowed", "the gift cannot be sent in this count")
	ErrBadReceivers        = sentinel(CodeInvalid, "bad_receivers", "receiver_user_ids must hold 1 to MaxGiftReceivers distinct users")
	ErrSelfGift            = sentinel(CodeInvalid, "cannot_gift_self", "the sender cannot be a receiver")
	ErrReceiverNotInRoom   = sentinel(CodeRejected, "receiver_not_in_room", "a receiver is not in the room")
	ErrReceiverNotOnMic    = sentinel(CodeRejected, "receiver_not_on_mic", "a receiver is not on a mic seat")
	ErrInsufficientBalance = sentinel(CodeRejected, "insufficient_balance", "the COIN balance does not cover the gift")
	ErrGiftExpired         = sentinel(CodeRejected, "gift_expired", "the gift's charge is too old to apply; it is refunded, send again with a new command_id")
	ErrGiftRefunded        = sentinel(CodeRejected, "gift_refunded", "the gift's charge was refunded; send again with a new command_id")
	ErrRocketNotPending    = sentinel(CodeRejected, "rocket_not_pending", "no ignited rocket with this id, level and launch time is waiting")
	ErrRocketNotDue        = sentinel(CodeRejected, "rocket_not_due", "the rocket's launch time has not come")
	ErrRocketStale         = sentinel(CodeRejected, "rocket_stale", "the rocket was ignited before the last daily reset")

	// Mic requests and invitations.
	ErrMicApprovalRequired    = sentinel(CodeRejected, "mic_approval_required", "the room requires approval to take a seat: send RequestMic")
	ErrMicApprovalNotRequired = sentinel(CodeRejected, "mic_approval_not_required", "the room does not require approval: take a seat with TakeMic")
	ErrMicRequestPending      = sentinel(CodeRejected, "mic_request_pending", "the user already has a pending mic request")
	ErrNoMicRequest           = sentinel(CodeRejected, "no_mic_request", "the user has no pending mic request")
	ErrMicInvitePending       = sentinel(CodeRejected, "mic_invite_pending", "the user already has a pending mic invitation")
	ErrNoMicInvite            = sentinel(CodeRejected, "no_mic_invite", "the user has no pending mic invitation")
	ErrMicQueueFull           = sentinel(CodeRejected, "mic_queue_full", "the room holds as many pending mic requests or invitations as it may")
	ErrNoFreeSeat             = sentinel(CodeRejected, "no_free_seat", "every seat is taken or locked")
	ErrMicQueueNotDue         = sentinel(CodeRejected, "mic_queue_not_due", "no mic request or invitation has expired")

	// Service.
	ErrMailboxFull = sentinel(CodeExhausted, "mailbox_full", "the room is busy; retry")
	// ErrNodeFull: the node holds its most rooms and none of them could be
	// passivated (every one has queued requests).
	ErrNodeFull    = sentinel(CodeExhausted, "node_full", "this node holds as many rooms as it may and all are busy; retry")
	ErrFenced      = sentinel(CodeUnavailable, "room_moved", "another node owns the room now; retry")
	ErrUnavailable = sentinel(CodeUnavailable, "unavailable", "storage is unavailable; retry")
	ErrShutdown    = sentinel(CodeUnavailable, "shutting_down", "the node is shutting down; retry")
	// ErrRecoveryFailed: the stored snapshot or log of the room cannot be
	// rebuilt (corrupt data, or a log this build cannot replay). Only that
	// room is affected; operators find it in the log and the
	// room_recoveries_total{result="failed"} counter.
	ErrRecoveryFailed = sentinel(CodeUnavailable, "room_recovery_failed", "the room could not be rebuilt from storage")
	ErrUnauthorized   = sentinel(CodeUnauthorized, "unauthenticated", "a valid service token is required")
	ErrInternal       = sentinel(CodeInternal, "internal", "internal error")
)
