package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"hyapp/room-service/auth"
	"hyapp/room-service/room"
)

// UserHeader carries the signed assertion (a JWT) of the end user a call
// acts for, from a caller without act-as-any.
const UserHeader = "X-Room-User"

// UserVerifier verifies a user assertion and returns its user id (an
// *auth.UserKeys). Safe for concurrent use.
type UserVerifier interface {
	Verify(token string) (int64, error)
}

// Refusals of the caller's credentials and rights. Each changes nothing.
var (
	// ErrMissingScope: the caller is known but lacks the scope of the call.
	ErrMissingScope = &room.Error{Code: room.CodePermission, Reason: "missing_scope", Message: "the caller lacks the scope this call needs"}
	// ErrOperatorMismatch: the user a call acts for is not the asserted user.
	ErrOperatorMismatch = &room.Error{Code: room.CodePermission, Reason: "operator_mismatch", Message: "the call acts for another user than the one asserted in " + UserHeader}
	// ErrUserAssertionRequired: a caller without act-as-any sent no user assertion.
	ErrUserAssertionRequired = &room.Error{Code: room.CodeUnauthorized, Reason: "user_assertion_required", Message: "this call acts for a user: send the user's assertion in " + UserHeader}
	// ErrUserAssertionInvalid: the user assertion does not verify (signature, aud, exp, sub).
	ErrUserAssertionInvalid = &room.Error{Code: room.CodeUnauthorized, Reason: "user_assertion_invalid", Message: "the user assertion in " + UserHeader + " does not verify"}
)

// principal is who makes a call: the caller and the user it asserted.
type principal struct {
	caller auth.Caller
	dev    bool  // no credentials are configured: every scope, any user
	user   int64 // the asserted user; 0: none was needed
}

func (p principal) has(s auth.Scope) bool { return p.dev || p.caller.Has(s) }

// name is the caller's name for logs.
func (p principal) name() string {
	if p.dev {
		return "(no credentials configured)"
	}
	return p.caller.Name
}

type principalKey struct{}

// principalOf returns the principal the gate admitted; ok is false outside
// a call.
func principalOf(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p, ok
}

// legacyScopes are the scopes of the single service token (Options.Token,
// ROOM_TOKEN): what it was used for before callers had scopes.
var legacyScopes = []auth.Scope{auth.Room, auth.ActAsAny}

// callersOf returns the callers of opts: Callers, and Token as one more
// caller named "token". Nil: no credentials are configured.
func callersOf(opts Options) *auth.Callers {
	list := opts.Callers
	if opts.Token != "" {
		list = append(list[:len(list):len(list)], auth.Caller{Name: "token", Hash: auth.HashToken(opts.Token), Scopes: legacyScopes})
	}
	if len(list) == 0 {
		return nil
	}
	cs, err := auth.NewCallers(list)
	if err != nil {
		panic(fmt.Sprintf("rpc: callers: %v", err)) // config.Validate refuses these
	}
	return cs
}

// authGate admits a call before its body is read: the caller's token
// (unauthenticated), the scope of the procedure (missing_scope), and for a
// call that acts for a user, unless the caller may act as anyone, the
// user's assertion (user_assertion_required, user_assertion_invalid).
// Without callers every call is admitted with every scope.
func authGate(callers *auth.Callers, users UserVerifier) connect.RequestGateFunc {
	return func(ctx context.Context, spec connect.Spec, _ connect.Peer, header http.Header) (context.Context, error) {
		a, declared := accessTable[spec.Procedure]
		if callers == nil {
			return context.WithValue(ctx, principalKey{}, principal{dev: true}), nil
		}
		c, ok := callers.Find(bearer(header))
		switch {
		case !ok:
			return ctx, toConnect(ctx, nil, room.ErrUnauthorized)
		case !declared:
			return ctx, toConnect(ctx, nil, room.Errorf(ErrMissingScope, "%s declares no scope", spec.Procedure))
		case !c.Has(a.scope):
			return ctx, toConnect(ctx, nil, room.Errorf(ErrMissingScope, "%s needs scope %s", spec.Procedure, a.scope))
		case a.anyUser && !c.Has(auth.ActAsAny):
			return ctx, toConnect(ctx, nil, room.Errorf(ErrMissingScope, "%s vouches for many users: it needs scope %s and %s", spec.Procedure, a.scope, auth.ActAsAny))
		}
		p := principal{caller: c}
		if a.actor != nil && !c.Has(auth.ActAsAny) {
			assertion := strings.TrimSpace(header.Get(UserHeader))
			if assertion == "" {
				return ctx, toConnect(ctx, nil, ErrUserAssertionRequired)
			}
			if users == nil {
				return ctx, toConnect(ctx, nil, room.Errorf(ErrUserAssertionInvalid, "no user keys are configured"))
			}
			id, err := users.Verify(assertion)
			if err != nil {
				return ctx, toConnect(ctx, nil, room.Errorf(ErrUserAssertionInvalid, "%v", err))
			}
			p.user = id
		}
		return context.WithValue(ctx, principalKey{}, p), nil
	}
}

// bearer reads the token of "Authorization: Bearer <token>".
func bearer(header http.Header) string {
	v := strings.TrimSpace(header.Get("Authorization"))
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return ""
	}
	return strings.TrimSpace(v[7:])
}

// authorize runs after the request decoded: a call that acts for a user
// must name the asserted user (operator_mismatch), unless its caller may
// act as anyone; calls of audited procedures are logged with their caller,
// scope, user and outcome.
func authorize(log *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			p, ok := principalOf(ctx)
			a, declared := accessTable[req.Spec().Procedure]
			if !ok || !declared {
				return nil, toConnect(ctx, log, room.Errorf(ErrMissingScope, "%s declares no scope", req.Spec().Procedure))
			}
			var actor int64
			if a.actor != nil {
				actor = a.actor(req.Any())
				if !p.has(auth.ActAsAny) && actor != p.user {
					return nil, toConnect(ctx, log, room.Errorf(ErrOperatorMismatch, "the call acts for user %d, the assertion is for user %d", actor, p.user))
				}
			}
			res, err := next(ctx, req)
			if a.audit {
				if actor == 0 {
					actor = userOf(req.Any()) // the user credited
				}
				audit(ctx, log, p, a.scope, actor, req, err)
			}
			return res, err
		}
	}
}

// audit logs one line for a call that uses a right worth a record: who
// (caller), with which scope, for which user, what, and the outcome.
func audit(ctx context.Context, log *slog.Logger, p principal, scope auth.Scope, user int64, req connect.AnyRequest, err error) {
	outcome := "ok"
	if err != nil {
		if outcome = Reason(err); outcome == "" {
			outcome = connect.CodeOf(err).String()
		}
	}
	attrs := []any{"caller", p.name(), "scope", scope, "user", user, "procedure", req.Spec().Procedure, "outcome", outcome}
	if by := req.Header().Get(ForwardedBy); by != "" {
		attrs = append(attrs, "forwarded_by", by)
	}
	if m, ok := req.Any().(roomed); ok && m.GetRoomId() != "" {
		attrs = append(attrs, "room_id", m.GetRoomId())
	}
	log.InfoContext(ctx, "audit", attrs...)
}
