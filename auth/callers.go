// Package auth says who calls room-service and what each caller may do:
// the callers (backend services) with their credentials and scopes, and the
// verification of the signed user assertion a gateway sends for the end
// user it acts for. It holds no transport: package rpc applies it to calls.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Scope is one right a caller holds.
type Scope string

// The scopes. Every RPC needs exactly one of them (rpc's access table);
// ActAsAny and Platform widen what a call with the room scope may do.
const (
	// Room: room commands and queries, for the acting user the call asserts.
	Room Scope = "room"
	// WalletCredit: CreditCoins (top-ups).
	WalletCredit Scope = "wallet.credit"
	// Operator: OperatorService (logs, snapshots, the outbox, the fleet).
	Operator Scope = "operator"
	// Platform: a user listed in platform_operators acts as platform staff
	// (any room's owner) only on calls from a caller with this scope.
	Platform Scope = "platform"
	// ActAsAny: a trusted backend names any operator_user_id without a user
	// assertion.
	ActAsAny Scope = "act-as-any"
)

// Scopes lists every scope.
var Scopes = []Scope{Room, WalletCredit, Operator, Platform, ActAsAny}

// MinTokenLen is the shortest token accepted: 32 bytes, so a token cannot
// be guessed.
const MinTokenLen = 32

// Caller is one backend service that calls the API: its name (for logs and
// audit), the SHA-256 of its token and its scopes.
type Caller struct {
	Name   string
	Hash   [sha256.Size]byte
	Scopes []Scope
}

// Has reports whether the caller holds scope s.
func (c Caller) Has(s Scope) bool { return slices.Contains(c.Scopes, s) }

// HashToken returns the SHA-256 of a token, as a Caller keeps it.
func HashToken(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// ParseHash reads a token's SHA-256 written as 64 hex digits.
func ParseHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != sha256.Size {
		return h, errors.New("not a SHA-256 in hex (64 digits)")
	}
	copy(h[:], b)
	return h, nil
}

// ParseScopes reads scopes joined by '+', refusing unknown ones.
func ParseScopes(list []string) ([]Scope, error) {
	var out []Scope
	for _, s := range list {
		sc := Scope(strings.TrimSpace(s))
		if !slices.Contains(Scopes, sc) {
			return nil, fmt.Errorf("unknown scope %q (known: %s)", s, joinScopes(Scopes))
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scope")
	}
	return out, nil
}

func joinScopes(s []Scope) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}

// NewCaller builds a caller from a token in the clear, refusing a short one.
func NewCaller(name, token string, scopes []Scope) (Caller, error) {
	if len(token) < MinTokenLen {
		return Caller{}, fmt.Errorf("caller %q: the token is %d bytes; at least %d are required", name, len(token), MinTokenLen)
	}
	return Caller{Name: name, Hash: HashToken(token), Scopes: scopes}, nil
}

// ParseTokens reads callers written as name=token:scope+scope, separated by
// ';' (the ROOM_TOKENS format). The token is everything between the first
// '=' and the last ':'.
func ParseTokens(s string) ([]Caller, error) {
	var out []Caller
	var p []error
	for _, entry := range strings.Split(s, ";") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, rest, ok := strings.Cut(entry, "=")
		i := strings.LastIndex(rest, ":")
		if !ok || i < 0 || strings.TrimSpace(name) == "" {
			p = append(p, fmt.Errorf("an entry is not name=token:scope+scope (%d bytes)", len(entry)))
			continue
		}
		name = strings.TrimSpace(name)
		scopes, err := ParseScopes(strings.Split(rest[i+1:], "+"))
		if err != nil {
			p = append(p, fmt.Errorf("caller %q: %w", name, err))
			continue
		}
		c, err := NewCaller(name, rest[:i], scopes)
		if err != nil {
			p = append(p, err)
			continue
		}
		out = append(out, c)
	}
	return out, errors.Join(p...)
}

// Callers finds the caller a token belongs to. The zero value knows nobody.
type Callers struct{ list []Caller }

// NewCallers checks that names and tokens are unique and returns the set.
func NewCallers(list []Caller) (*Callers, error) {
	var p []error
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]string{}
	for _, c := range list {
		if c.Name == "" {
			p = append(p, errors.New("a caller has no name"))
		}
		if names[c.Name] {
			p = append(p, fmt.Errorf("caller %q is configured twice", c.Name))
		}
		names[c.Name] = true
		if other, dup := hashes[c.Hash]; dup {
			p = append(p, fmt.Errorf("callers %q and %q have the same token", other, c.Name))
		}
		hashes[c.Hash] = c.Name
	}
	return &Callers{list: slices.Clone(list)}, errors.Join(p...)
}

// Len returns the number of callers; 0 means no credential is configured.
func (cs *Callers) Len() int {
	if cs == nil {
		return 0
	}
	return len(cs.list)
}

// Find returns the caller whose token is token. It compares the token's
// hash with every caller's in constant time, so the time taken does not
// tell how close a guess was.
func (cs *Callers) Find(token string) (Caller, bool) {
	if cs == nil || token == "" {
		return Caller{}, false
	}
	h := HashToken(token)
	found := -1
	for i := range cs.list {
		if subtle.ConstantTimeCompare(h[:], cs.list[i].Hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Caller{}, false
	}
	return cs.list[found], true
}
