package im

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
)

// callCounter is a GroupAPI that counts its calls and makes none.
type callCounter struct{ n int }

func (c *callCounter) CreateGroup(context.Context, string, string) error        { c.n++; return nil }
func (c *callCounter) DestroyGroup(context.Context, string) error               { c.n++; return nil }
func (c *callCounter) RenameGroup(context.Context, string, string) error        { c.n++; return nil }
func (c *callCounter) ShutUpAllMember(context.Context, string, bool) error      { c.n++; return nil }
func (c *callCounter) UnbanGroupMember(context.Context, string, []string) error { c.n++; return nil }
func (c *callCounter) ForbidSendMsg(context.Context, string, []string, uint32) error {
	c.n++
	return nil
}
func (c *callCounter) BanGroupMember(context.Context, string, []string, uint32, string) error {
	c.n++
	return nil
}

// TestControlTypesAreWhatApplyActsOn: the consumer's filter (controlTypes)
// is exactly the event types apply makes Tencent calls for, so a type added
// to one and not the other is caught here: events control needs would never
// be delivered, or events it ignores would be.
func TestControlTypesAreWhatApplyActsOn(t *testing.T) {
	for _, typ := range room.EventTypes() {
		api := &callCounter{}
		c := Control{API: api}.withDefaults()
		ev := &roomv1.RoomEvent{EventId: "e", EventType: string(typ), RoomId: "r", PayloadJson: "{}"}
		if err := c.apply(context.Background(), ev); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if acts, filtered := api.n > 0, slices.Contains(controlTypes, string(typ)); acts != filtered {
			t.Errorf("%s: apply makes %d calls, but in controlTypes: %v", typ, api.n, filtered)
		}
	}
}

// durations is a GroupAPI that keeps the duration of each mute and ban.
type durations struct {
	callCounter
	calls []string
}

func (d *durations) ForbidSendMsg(_ context.Context, _ string, _ []string, secs uint32) error {
	d.calls = append(d.calls, fmt.Sprintf("forbid %d", secs))
	return nil
}

func (d *durations) UnbanGroupMember(context.Context, string, []string) error {
	d.calls = append(d.calls, "unban")
	return nil
}

func (d *durations) BanGroupMember(_ context.Context, _ string, _ []string, secs uint32, _ string) error {
	d.calls = append(d.calls, fmt.Sprintf("ban %d", secs))
	return nil
}

// TestALateMuteEndsWhenTheRoomSays: a timed mute or ban applied late (a
// Tencent outage, a backlog of retries) lasts until the time the room
// gave it, not its duration from the call: Tencent counts ShutUpTime and
// Duration from the call. One whose end has passed is lifted, not started
// (a ban too: the kick may stand for an unban before it, see applyLatest).
func TestALateMuteEndsWhenTheRoomSays(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := at.Add(10 * time.Minute)
	for _, tc := range []struct {
		typ     room.EventType
		payload any
		want    []string
	}{
		{room.EventRoomUserMuted, room.RoomUserMutedEvent{UserID: 5, Muted: true, MutedUntil: at.Add(11 * time.Minute).UnixMilli()}, []string{"forbid 60"}},
		{room.EventRoomUserMuted, room.RoomUserMutedEvent{UserID: 5, Muted: true, MutedUntil: at.Add(5 * time.Minute).UnixMilli()}, []string{"forbid 0"}},
		{room.EventRoomUserKicked, room.RoomUserKickedEvent{UserID: 5, BannedUntil: at.Add(11 * time.Minute).UnixMilli()}, []string{"ban 60"}},
		{room.EventRoomUserKicked, room.RoomUserKickedEvent{UserID: 5, BannedUntil: at.Add(5 * time.Minute).UnixMilli()}, []string{"unban"}},
	} {
		api := &durations{}
		c := Control{API: api, now: func() time.Time { return now }}.withDefaults()
		data, err := json.Marshal(tc.payload)
		if err != nil {
			t.Fatal(err)
		}
		ev := &roomv1.RoomEvent{EventId: "e", EventType: string(tc.typ), RoomId: "r", PayloadJson: string(data), OccurredAtMs: at.UnixMilli()}
		if err := c.apply(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(api.calls, tc.want) {
			t.Errorf("%s %s applied 10 minutes late: calls %v, want %v", tc.typ, data, api.calls, tc.want)
		}
	}
}
