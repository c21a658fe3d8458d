package im_test

import (
	"strings"
	"testing"

	"hyapp/room-service/im"
)

func TestGroupID(t *testing.T) {
	long := strings.Repeat("r", 49)
	for _, tc := range []struct {
		room   string
		same   bool   // the room id is its own group id
		prefix string // of a derived id
	}{
		{room: "r1", same: true},
		{room: strings.Repeat("r", 48), same: true},
		{room: "a!#$%&'()*+,-./:;<=>?[]^_`{|}", same: true},
		{room: long, prefix: "~rrrrrrrrrrrrrr~"},
		{room: "@TGS#abc", prefix: "~@TGS#abc~"},
		{room: "@TGSabc", prefix: "~@TGSabc~"},
		{room: "~r1", prefix: "~~r1~"},
		{room: "", prefix: "~~"},
	} {
		got := im.GroupID(tc.room)
		if tc.same {
			if got != tc.room {
				t.Errorf("GroupID(%q) = %q, want the room id", tc.room, got)
			}
			continue
		}
		if !strings.HasPrefix(got, tc.prefix) || len(got) > 48 || len(got) != len(tc.prefix)+32 {
			t.Errorf("GroupID(%q) = %q, want %s + 32 hex digits, at most 48 bytes", tc.room, got, tc.prefix)
		}
		if got != im.GroupID(tc.room) {
			t.Errorf("GroupID(%q) is not deterministic", tc.room)
		}
	}
	// Room ids that share their first 14 bytes still get different groups.
	if a, b := im.GroupID(long+"a"), im.GroupID(long+"b"); a == b {
		t.Fatalf("two room ids share group %s", a)
	}
	// The example docs/im-messages.md gives client developers (checked with
	// printf 'r%.0s' $(seq 49) | sha256sum).
	if got, want := im.GroupID(long), "~rrrrrrrrrrrrrr~cf82b2433c1fc450ae35781df47aa2f4"; got != want {
		t.Fatalf("GroupID(49 r) = %s, want %s", got, want)
	}
}
