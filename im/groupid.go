package im

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Tencent IM's rules for a group id chosen by the caller: 1 to 48 bytes of
// printable ASCII (0x20-0x7e), not starting with "@TGS" (reserved for the ids
// Tencent assigns; the REST page says "@TGS#", the SDK pages "@TGS", so the
// stricter one is kept).
const (
	maxGroupIDBytes = 48
	tencentPrefix   = "@TGS"
)

// hashedMark starts every group id GroupID derives by hashing, and a room id
// that starts with it is hashed too: derived ids and room ids used as they
// are can never be equal.
const hashedMark = "~"

// hashedHead is how many bytes of the room id a derived group id keeps, so
// that it stays readable in Tencent's console: "~" + 14 bytes + "~" + 32 hex
// digits is exactly 48 bytes.
const hashedHead = 14

// GroupID is the Tencent IM group id of a room, the one function every part
// of the service (the lane, group control, tools) uses to find a room's
// group. A room id that is a valid Tencent group id and does not start with
// "~" is its own group id, so existing groups keep their ids. Any other
// room id (over 48 bytes, starting with "@TGS" or "~", or holding a byte
// outside printable ASCII) maps to
//
//	"~" + its first 14 bytes (bytes outside 0x21-0x7e as "_") + "~" + hex(SHA-256(room id)[:16])
//
// which is valid, at most 48 bytes, and starts with "~": it never equals a
// room id used as it is, and two derived ids are equal only if 128 bits of
// SHA-256 collide. docs/im-messages.md gives clients the same rule.
func GroupID(roomID string) string {
	if validGroupID(roomID) && !strings.HasPrefix(roomID, hashedMark) {
		return roomID
	}
	head := []byte(roomID[:min(len(roomID), hashedHead)])
	for i, c := range head {
		if c <= ' ' || c > '~' {
			head[i] = '_'
		}
	}
	sum := sha256.Sum256([]byte(roomID))
	return hashedMark + string(head) + hashedMark + hex.EncodeToString(sum[:16])
}

// validGroupID reports whether Tencent accepts id as a caller-chosen group id.
func validGroupID(id string) bool {
	if id == "" || len(id) > maxGroupIDBytes || strings.HasPrefix(id, tencentPrefix) {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
