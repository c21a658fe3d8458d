package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const tok32 = "0123456789abcdef0123456789abcdef"

func TestParseTokens(t *testing.T) {
	cs, err := ParseTokens("gw=" + tok32 + ":room; topup=x" + tok32 + ":wallet.credit+room ;")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Name != "gw" || !slices.Equal(cs[0].Scopes, []Scope{Room}) ||
		cs[1].Name != "topup" || !cs[1].Has(WalletCredit) || !cs[1].Has(Room) || cs[1].Has(Operator) {
		t.Fatalf("parsed %+v", cs)
	}
	set, err := NewCallers(cs)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := set.Find("x" + tok32); !ok || c.Name != "topup" {
		t.Fatalf("find topup: %v %v", c, ok)
	}
	for _, bad := range []string{"", tok32[:31], "nope" + tok32} {
		if _, ok := set.Find(bad); ok {
			t.Errorf("token %q found", bad)
		}
	}
	for _, bad := range []string{
		"gw=" + tok32,                 // no scopes
		"gw=" + tok32 + ":room+admin", // unknown scope
		"gw=short:room",               // short token
		"=" + tok32 + ":room",         // no name
		"gw" + tok32 + ":room",        // no =
	} {
		if _, err := ParseTokens(bad); err == nil {
			t.Errorf("%q parsed", bad)
		} else if strings.Contains(err.Error(), tok32) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
	if _, err := NewCallers(append(cs, cs[0])); err == nil {
		t.Error("a caller twice was accepted")
	}
	h := HashToken(tok32)
	if got, err := ParseHash(hex.EncodeToString(h[:])); err != nil || got != h {
		t.Errorf("parse hash: %v", err)
	}
}

func sign(t *testing.T, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tk := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tk.Header["kid"] = kid
	}
	s, err := tk.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claims(sub string, aud string, exp time.Duration) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "aud": aud, "exp": time.Now().Add(exp).Unix()}
}

func TestHS256Assertions(t *testing.T) {
	if _, err := ParseUserKeys("hs256:short"); err == nil {
		t.Fatal("a short secret was accepted")
	}
	k, err := ParseUserKeys("hs256:" + tok32)
	if err != nil {
		t.Fatal(err)
	}
	good := sign(t, jwt.SigningMethodHS256, []byte(tok32), "", claims("42", Audience, time.Minute))
	if id, err := k.Verify(good); err != nil || id != 42 {
		t.Fatalf("verify: %d %v", id, err)
	}
	for name, tok := range map[string]string{
		"other secret":   sign(t, jwt.SigningMethodHS256, []byte("x"+tok32), "", claims("42", Audience, time.Minute)),
		"other audience": sign(t, jwt.SigningMethodHS256, []byte(tok32), "", claims("42", "wallet", time.Minute)),
		"expired":        sign(t, jwt.SigningMethodHS256, []byte(tok32), "", claims("42", Audience, -time.Minute)),
		"exp far ahead":  sign(t, jwt.SigningMethodHS256, []byte(tok32), "", claims("42", Audience, time.Hour)),
		"no exp":         sign(t, jwt.SigningMethodHS256, []byte(tok32), "", jwt.MapClaims{"sub": "42", "aud": Audience}),
		"sub not an id":  sign(t, jwt.SigningMethodHS256, []byte(tok32), "", claims("alice", Audience, time.Minute)),
		"sub zero":       sign(t, jwt.SigningMethodHS256, []byte(tok32), "", claims("0", Audience, time.Minute)),
		"alg none":       sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims("42", Audience, time.Minute)),
		"garbage":        "a.b.c",
	} {
		if id, err := k.Verify(tok); err == nil {
			t.Errorf("%s: verified as user %d", name, id)
		}
	}
}

func writeJWKS(t *testing.T, path string, keys ...map[string]string) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestJWKSAssertionsRotateByKid(t *testing.T) {
	b64 := base64.RawURLEncoding.EncodeToString
	edPub, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecPub, _ := ecKey.PublicKey.Bytes() // 0x04 || X || Y
	edJWK := map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "x": b64(edPub)}
	ecJWK := map[string]string{"kty": "EC", "crv": "P-256", "kid": "ec-2", "x": b64(ecPub[1:33]), "y": b64(ecPub[33:])}

	path := filepath.Join(t.TempDir(), "users.jwks")
	writeJWKS(t, path, edJWK)
	k, err := ParseUserKeys("jwks:" + path)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	k.now = func() time.Time { return clock }
	edTok := sign(t, jwt.SigningMethodEdDSA, edKey, "ed-1", claims("7", Audience, time.Minute))
	if id, err := k.Verify(edTok); err != nil || id != 7 {
		t.Fatalf("EdDSA: %d %v", id, err)
	}
	ecTok := sign(t, jwt.SigningMethodES256, ecKey, "ec-2", claims("8", Audience, time.Minute))
	if _, err := k.Verify(ecTok); err == nil {
		t.Fatal("a kid not in the file verified")
	}
	// The new key is published, the old one retired: the next unknown kid
	// reads the file again.
	writeJWKS(t, path, ecJWK)
	clock = clock.Add(2 * reloadEvery)
	if id, err := k.Verify(ecTok); err != nil || id != 8 {
		t.Fatalf("ES256 after rotation: %d %v", id, err)
	}
	if _, err := k.Verify(edTok); err == nil {
		t.Fatal("a retired key still verifies")
	}
	// Both keys published, then the EdDSA one retired again: a known kid
	// stops verifying once the changed file is read.
	writeJWKS(t, path, ecJWK, edJWK)
	clock = clock.Add(2 * reloadEvery)
	if _, err := k.Verify(edTok); err != nil {
		t.Fatalf("EdDSA republished: %v", err)
	}
	writeJWKS(t, path, ecJWK)
	clock = clock.Add(2 * reloadEvery)
	if _, err := k.Verify(edTok); err == nil {
		t.Fatal("a key removed from the file still verifies")
	}
	// A key used with another algorithm than its type is refused.
	wrongAlg := sign(t, jwt.SigningMethodHS256, []byte(tok32), "ec-2", claims("8", Audience, time.Minute))
	if _, err := k.Verify(wrongAlg); err == nil {
		t.Fatal("HS256 verified against a JWKS")
	}
	for _, bad := range []string{"", "rsa:x", "jwks:" + filepath.Join(t.TempDir(), "missing")} {
		if _, err := ParseUserKeys(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
