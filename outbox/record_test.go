package outbox_test

import (
	"fmt"
	"strings"
	"testing"

	"hyapp/room-service/outbox"
)

// An event id reads "room/version/seq", for short room ids and for the
// longest the service takes.
func TestEventIDIsRoomVersionSeq(t *testing.T) {
	for _, c := range []struct {
		room    string
		version int64
		seq     int32
	}{
		{"r1", 1, 0},
		{"room-9", 1234567890123, 7},
		{strings.Repeat("x", 128), 1<<63 - 1, 1<<31 - 1},
		{"", 0, 0},
	} {
		if got, want := outbox.EventID(c.room, c.version, c.seq), fmt.Sprintf("%s/%d/%d", c.room, c.version, c.seq); got != want {
			t.Errorf("EventID(%q, %d, %d) = %q; want %q", c.room, c.version, c.seq, got, want)
		}
	}
}
