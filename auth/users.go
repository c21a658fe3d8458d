package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Audience is the aud a user assertion must name.
const Audience = "room-service"

// Bounds of a user assertion's lifetime: its exp may lie at most
// MaxAssertionLife ahead (a gateway mints one per call or per few
// minutes), and clocks may differ by Leeway.
const (
	MaxAssertionLife = 15 * time.Minute
	Leeway           = 5 * time.Second
)

// minHS256Secret is the shortest HS256 secret accepted.
const minHS256Secret = 32

// UserKeys verifies user assertions: JWTs whose sub is the user id a
// gateway acts for, aud is Audience and exp is near. The keys are an HS256
// secret, or a JWKS file of Ed25519 (EdDSA) and P-256 (ES256) public keys
// chosen by kid; a kid the file did not have is looked up again in the
// file (at most once a second), so keys rotate by adding the new key to the
// file before gateways use it and removing the old one after. Safe for
// concurrent use.
//
// The file is also read again when it changed (its modification time or
// size, looked at at most once a second), so a key removed from it stops
// verifying within about a second.
type UserKeys struct {
	hs256 []byte // set for an HS256 secret
	path  string // set for a JWKS file
	now   func() time.Time

	mu        sync.Mutex
	keys      map[string]crypto.PublicKey // by kid
	loadedAt  time.Time
	checkedAt time.Time   // when the file's stat was last looked at
	stamp     os.FileInfo // the file as loaded
}

// ParseUserKeys reads the ROOM_USER_JWT_KEYS format: "hs256:<secret>" (at
// least 32 bytes) or "jwks:<path of a JWKS file>". A JWKS file is read now,
// so a bad one fails at start.
func ParseUserKeys(spec string) (*UserKeys, error) {
	kind, v, ok := strings.Cut(spec, ":")
	switch {
	case ok && kind == "hs256":
		if len(v) < minHS256Secret {
			return nil, fmt.Errorf("user_jwt_keys: the hs256 secret is %d bytes; at least %d are required", len(v), minHS256Secret)
		}
		return &UserKeys{hs256: []byte(v), now: time.Now}, nil
	case ok && kind == "jwks":
		k := &UserKeys{path: v, now: time.Now}
		if err := k.load(); err != nil {
			return nil, err
		}
		return k, nil
	}
	return nil, errors.New(`user_jwt_keys is not "hs256:<secret>" or "jwks:<file>"`)
}

// Verify checks a user assertion and returns its user id (sub).
func (k *UserKeys) Verify(token string) (int64, error) {
	now := k.now()
	methods := []string{"EdDSA", "ES256"}
	if k.hs256 != nil {
		methods = []string{"HS256"}
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, k.key,
		jwt.WithValidMethods(methods), jwt.WithAudience(Audience), jwt.WithExpirationRequired(),
		jwt.WithLeeway(Leeway), jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil {
		return 0, err
	}
	if claims.ExpiresAt.After(now.Add(MaxAssertionLife + Leeway)) {
		return 0, fmt.Errorf("exp is more than %v ahead", MaxAssertionLife)
	}
	id, err := strconv.ParseInt(claims.Subject, 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("sub is not a positive user id")
	}
	return id, nil
}

// key finds the key that verifies t: the secret, or the JWKS key of its kid
// whose type matches its alg.
func (k *UserKeys) key(t *jwt.Token) (any, error) {
	if k.hs256 != nil {
		return k.hs256, nil
	}
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, errors.New("the assertion names no kid")
	}
	pub, err := k.lookup(kid)
	if err != nil {
		return nil, err
	}
	switch pub.(type) {
	case ed25519.PublicKey:
		if t.Method.Alg() == "EdDSA" {
			return pub, nil
		}
	case *ecdsa.PublicKey:
		if t.Method.Alg() == "ES256" {
			return pub, nil
		}
	}
	return nil, fmt.Errorf("key %q does not verify %s", kid, t.Method.Alg())
}

// reloadEvery bounds how often an unknown kid reads the file again.
const reloadEvery = time.Second

func (k *UserKeys) lookup(kid string) (crypto.PublicKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now := k.now(); now.Sub(k.checkedAt) >= reloadEvery {
		k.checkedAt = now
		if fi, err := os.Stat(k.path); err == nil && k.stamp != nil && (!fi.ModTime().Equal(k.stamp.ModTime()) || fi.Size() != k.stamp.Size()) {
			_ = k.loadLocked() // a file caught half-written keeps the keys loaded before
		}
	}
	if pub, ok := k.keys[kid]; ok {
		return pub, nil
	}
	if k.now().Sub(k.loadedAt) >= reloadEvery {
		if err := k.loadLocked(); err != nil {
			return nil, err
		}
		if pub, ok := k.keys[kid]; ok {
			return pub, nil
		}
	}
	return nil, fmt.Errorf("no key %q", kid)
}

func (k *UserKeys) load() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.loadLocked()
}

// jwk is the part of a JSON Web Key this service reads.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	Kid string `json:"kid"`
	X   string `json:"x"`
	Y   string `json:"y"`
	Use string `json:"use"`
}

// loadLocked reads the JWKS file. A file that fails to read or parse keeps
// the keys loaded before.
func (k *UserKeys) loadLocked() error {
	k.loadedAt = k.now()
	fi, err := os.Stat(k.path)
	if err != nil {
		return fmt.Errorf("user_jwt_keys: %w", err)
	}
	data, err := os.ReadFile(k.path)
	if err != nil {
		return fmt.Errorf("user_jwt_keys: %w", err)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return fmt.Errorf("user_jwt_keys %s: %w", k.path, err)
	}
	keys := map[string]crypto.PublicKey{}
	for i, j := range set.Keys {
		pub, err := j.public()
		if err != nil {
			return fmt.Errorf("user_jwt_keys %s: key %d (kid %q): %w", k.path, i, j.Kid, err)
		}
		if j.Kid == "" {
			return fmt.Errorf("user_jwt_keys %s: key %d has no kid", k.path, i)
		}
		keys[j.Kid] = pub
	}
	if len(keys) == 0 {
		return fmt.Errorf("user_jwt_keys %s: no keys", k.path)
	}
	k.keys, k.stamp = keys, fi
	return nil
}

func (j jwk) public() (crypto.PublicKey, error) {
	if j.Use != "" && j.Use != "sig" {
		return nil, fmt.Errorf("use %q is not sig", j.Use)
	}
	x, err := base64.RawURLEncoding.DecodeString(j.X)
	if err != nil {
		return nil, errors.New("x is not base64url")
	}
	switch {
	case j.Kty == "OKP" && j.Crv == "Ed25519":
		if len(x) != ed25519.PublicKeySize {
			return nil, errors.New("x is not an Ed25519 public key")
		}
		return ed25519.PublicKey(x), nil
	case j.Kty == "EC" && j.Crv == "P-256":
		y, err := base64.RawURLEncoding.DecodeString(j.Y)
		if err != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("x and y are not a P-256 point")
		}
		return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	}
	return nil, fmt.Errorf("kty %q crv %q: only OKP Ed25519 and EC P-256 keys are supported", j.Kty, j.Crv)
}
