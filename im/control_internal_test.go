package im

import (
	"context"
	"slices"
	"testing"

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
