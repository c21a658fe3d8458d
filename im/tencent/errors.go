package tencent

import (
	"errors"
	"fmt"
	"strconv"
)

// The meanings a caller switches on, checked with errors.Is. An *APIError wraps the one its code maps to;
// transport failures and HTTP 5xx wrap ErrTransient directly.
var (
	// ErrSignature means Tencent refused the call's credentials: the UserSig is expired, unparseable or
	// signed with another key; the identifier is not an App admin; or the SDKAppID is unknown in the
	// data center called (a wrong Endpoint region). Retrying does not help; the cached UserSig is dropped
	// so the next call signs afresh.
	ErrSignature = errors.New("signature or credentials rejected")
	// ErrRateLimited means a call budget was exceeded: Tencent's per-API or per-app frequency limit, the
	// per-group send limit (10023), or the client's own budget could not be had before ctx ended.
	// Tencent's answers are retried with backoff before this is returned, except for a Paced command.
	ErrRateLimited = errors.New("rate limited")
	// ErrGroupNotFound means the group does not exist, was dissolved, or its ID is invalid.
	ErrGroupNotFound = errors.New("group not found")
	// ErrGroupExists means the group ID is already in use. CreateGroup treats it as success.
	ErrGroupExists = errors.New("group already exists")
	// ErrTooLarge means the message is over Tencent's size limit (80002).
	ErrTooLarge = errors.New("message too large")
	// ErrTransient means the outcome is unknown or the service failed internally (transport error,
	// timeout, HTTP 5xx, 10002). It was retried before being returned, unless its command is Paced; a
	// later retry may succeed, and for SendGroupMsg it must reuse the same Msg.Random.
	ErrTransient = errors.New("transient failure")
	// ErrDropped means Tencent answered success for SendGroupMsg but reported MsgDropReason: the message
	// was dropped by the group's frequency control (40 messages/s per group) and is neither delivered nor
	// stored. Re-sending with the same Random is a duplicate and is dropped too.
	ErrDropped = errors.New("message dropped by frequency control")
	// ErrInvalid means the request can never succeed as it is: the client refused it before calling (a
	// group id Tencent would refuse, an empty name, invalid UTF-8) or Tencent answered that a parameter,
	// the command or the permission is wrong, or that a plan limit is reached. Sending it again is futile.
	ErrInvalid = errors.New("invalid request")
)

// codeMeanings maps Tencent error codes to the sentinel they mean (reference sections 1.3 and 3).
var codeMeanings = map[int]error{
	// UserSig and account errors.
	70001: ErrSignature, // UserSig expired
	70003: ErrSignature, // UserSig unparseable
	70009: ErrSignature, // UserSig verification failed (key of another SDKAppID)
	70013: ErrSignature, // identifier differs from the one inside the UserSig
	70014: ErrSignature, // sdkappid differs from the one inside the UserSig
	70016: ErrSignature, // key not found: wrong data center
	70020: ErrSignature, // SDKAppID not found: wrong data center
	70050: ErrSignature, // verification failed and rate-limited for a minute: retrying sooner is futile
	60004: ErrSignature, // account or signature error in URL/body
	60005: ErrSignature,
	60006: ErrSignature, // SDKAppID invalid
	60010: ErrSignature, // identifier is not an App admin

	// Frequency limits.
	60007: ErrRateLimited, // REST per-API frequency
	60011: ErrRateLimited, // SDKAppID-level frequency
	60018: ErrRateLimited, // too frequent, retry later
	60019: ErrRateLimited,
	10006: ErrRateLimited, // operation frequency limit
	10023: ErrRateLimited, // group message frequency

	// Groups.
	10010: ErrGroupNotFound, // does not exist or dissolved
	10015: ErrGroupNotFound, // invalid group ID
	10021: ErrGroupExists,   // ID in use
	10025: ErrGroupExists,   // ID in use and the operator owns it

	// Requests that are wrong as they are.
	10003: ErrInvalid, // invalid command word
	10004: ErrInvalid, // invalid parameter
	10007: ErrInvalid, // no permission
	10016: ErrInvalid, // the app backend's callback refused it
	10036: ErrInvalid, // too many AVChatRoom groups for the plan
	10037: ErrInvalid, // per-user group count over the plan limit
	10038: ErrInvalid, // member count over the plan limit
	60002: ErrInvalid, // HTTP parse error
	60003: ErrInvalid, // request JSON parse error
	60009: ErrInvalid, // wrong resource or URL

	// Messages.
	80001: ErrInvalid, // content security
	80002: ErrTooLarge,

	// Service.
	10002: ErrTransient, // internal error, retry
}

// APIError is a failure Tencent reported in the response envelope (ActionStatus "FAIL" or a non-zero
// ErrorCode). It unwraps to the sentinel its code means, if any.
type APIError struct {
	// Code is Tencent's ErrorCode.
	Code int
	// Info is Tencent's ErrorInfo text.
	Info string
	// Command is the REST command called, e.g. "send_group_msg".
	Command string
}

// Error describes the failure with its command and code.
func (e *APIError) Error() string {
	if m := codeMeanings[e.Code]; m != nil {
		return fmt.Sprintf("tencent im %s: error %d (%v): %s", e.Command, e.Code, m, e.Info)
	}
	return fmt.Sprintf("tencent im %s: error %d: %s", e.Command, e.Code, e.Info)
}

// Unwrap returns the sentinel e's code maps to, or nil.
func (e *APIError) Unwrap() error { return codeMeanings[e.Code] }

// Permanent reports whether err can never succeed when the same call is made again: ErrInvalid or
// ErrTooLarge. Everything else may pass later: transport failures, 10002, rate limits, signature errors (a
// configuration problem of every call, fixed by the operator), context errors, group not found (creating
// the group fixes it) and codes this package does not know (retrying an unknown code costs a retry; giving
// up on it could drop a kick).
func Permanent(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrTooLarge)
}

// Reason is a short stable label of err for metrics and operators: "tencent_<code>" for an answer of
// Tencent, "invalid_request" for one the client refused before calling, "other" otherwise.
func Reason(err error) string {
	var apiErr *APIError
	switch {
	case errors.As(err, &apiErr):
		return "tencent_" + strconv.Itoa(apiErr.Code)
	case errors.Is(err, ErrInvalid):
		return "invalid_request"
	case errors.Is(err, ErrTransient):
		return "transient"
	case errors.Is(err, ErrRateLimited):
		return "rate_limited"
	}
	return "other"
}

// retryable reports whether a failure may succeed when the same request is sent again.
func retryable(err error) bool {
	return errors.Is(err, ErrTransient) || errors.Is(err, ErrRateLimited)
}
