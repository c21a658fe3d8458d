// Package rpc serves room-service's API with connect-go: gRPC, gRPC-Web and
// Connect HTTP/JSON on one port. It maps requests to domain commands, and
// domain errors to transport codes in exactly one place (codes below).
package rpc

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"hyapp/room-service/room"
)

// ErrorDomain is the ErrorInfo domain of every error this service returns.
const ErrorDomain = "room.v1"

// codes is the one table from application error codes to Connect/gRPC codes.
var codes = map[room.Code]connect.Code{
	room.CodeInvalid:       connect.CodeInvalidArgument,
	room.CodeNotFound:      connect.CodeNotFound,
	room.CodeConflict:      connect.CodeAlreadyExists,
	room.CodeRejected:      connect.CodeFailedPrecondition,
	room.CodePermission:    connect.CodePermissionDenied,
	room.CodeUnauthorized:  connect.CodeUnauthenticated,
	room.CodeExhausted:     connect.CodeResourceExhausted,
	room.CodeUnavailable:   connect.CodeUnavailable,
	room.CodeInternal:      connect.CodeInternal,
	room.CodeUnimplemented: connect.CodeUnimplemented,
}

// toConnect turns any error into a Connect error with a google.rpc.ErrorInfo
// detail carrying the stable reason. Internal error text is logged, not sent.
func toConnect(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	e := room.AsError(err)
	msg := e.Error()
	if e.Code == room.CodeInternal {
		log.ErrorContext(ctx, "internal error", "err", err)
		msg = "internal error"
	}
	code, ok := codes[e.Code]
	if !ok {
		code = connect.CodeInternal
	}
	out := connect.NewError(code, errors.New(msg))
	if detail, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: e.Reason, Domain: ErrorDomain, Metadata: e.Metadata}); derr == nil {
		out.AddDetail(detail)
	}
	return out
}

// Reason returns the stable reason of an error returned by this service's
// API, as a client sees it, or "" when it carries none.
func Reason(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// ErrorMetadata returns the ErrorInfo metadata of an error returned by this
// service's API (the balance and the amount needed of insufficient_balance),
// or nil when it carries none.
func ErrorMetadata(err error) map[string]string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetMetadata()
		}
	}
	return nil
}
