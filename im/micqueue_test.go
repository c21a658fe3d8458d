package im_test

import (
	"testing"
	"time"

	"hyapp/room-service/im"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// The mic queue's events and the owner change are High: in a room far over
// its budget and queue, with joins folded and shed around them, every one
// arrives, and a message carrying one alone goes as High.
func TestMicQueueAndRoleEventsAreHigh(t *testing.T) {
	rec := &recorder{}
	var c counts
	lane := im.New(im.Config{Budget: 20, QueueLimit: 20}, rec, c.metrics(), quiet)
	defer lane.Close()
	highTypes := []room.EventType{room.EventRoomMicRequestChanged, room.EventRoomMicInviteChanged, room.EventRoomMicApprovalChanged, room.EventRoomOwnerChanged}
	lone := committed("solo", 1, room.EventRoomMicInviteChanged, &room.RoomMicInviteChangedEvent{Action: room.MicQueueInvited, UserID: 3, Pending: true})
	lane.Publish(lone)
	want := map[room.EventType]int{}
	for v := int64(1); v <= 400; v++ {
		if v%10 == 0 {
			typ := highTypes[int(v/10)%len(highTypes)]
			var data any
			switch typ {
			case room.EventRoomMicRequestChanged:
				data = &room.RoomMicRequestChangedEvent{Action: room.MicQueueRequested, UserID: v, Pending: true}
			case room.EventRoomMicInviteChanged:
				data = &room.RoomMicInviteChangedEvent{Action: room.MicQueueExpired, UserID: v}
			case room.EventRoomMicApprovalChanged:
				data = &room.RoomMicApprovalChangedEvent{Required: v%20 == 0}
			default:
				data = &room.RoomOwnerChangedEvent{OwnerUserID: v}
			}
			lane.Publish(committed("busy", v, typ, data))
			want[typ]++
			continue
		}
		lane.Publish(committed("busy", v, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: v}))
	}
	poll.Until(t, 30*time.Second, "every mic queue and owner event", poll.Bool(func() bool {
		var msgs [][]byte
		solo := false
		for _, s := range rec.all() {
			if s.msg.RoomID == "busy" {
				msgs = append(msgs, s.msg.Data)
			}
			solo = solo || s.msg.RoomID == "solo"
		}
		if !solo {
			return false
		}
		for typ, n := range want {
			// The approval switch is a state kind: a newer one may replace a
			// waiting older one, never lose the latest.
			if got := countType(t, msgs, typ); got < n && typ != room.EventRoomMicApprovalChanged || got == 0 {
				return false
			}
		}
		return true
	}))
	for _, s := range rec.all() {
		if s.msg.RoomID == "solo" && s.msg.Priority != room.PriorityHigh {
			t.Fatalf("a lone mic invitation went as %s", s.msg.Priority)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shed["High"] != 0 {
		t.Fatalf("%d High events shed", c.shed["High"])
	}
}

// A permanent chat mute mutes the member in the group until lifted (ten
// years, not the one second a mute ending at 0 would be), and UnbanUser
// lifts it there too.
func TestPermanentMuteHoldsInTheGroup(t *testing.T) {
	w := newControlWorld(t, nil)
	w.submit(t, "pm", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8, Title: "t"})
	poll.Until(t, 30*time.Second, "the group", poll.Bool(func() bool { return w.hasGroup("pm") }))
	w.submit(t, "pm", "join", 5, &room.JoinRoom{})
	w.submit(t, "pm", "mute", 1, &room.MuteUser{TargetUserID: 5, Permanent: true, Reason: "spam"})
	poll.Until(t, 30*time.Second, "the mute in the group", poll.Bool(func() bool { _, ok := w.local.Muted("pm")["5"]; return ok }))
	if until := w.local.Muted("pm")["5"]; time.Until(until) < 365*24*time.Hour {
		t.Fatalf("a permanent mute ends at %v", until)
	}
	w.submit(t, "pm", "pardon", 1, &room.UnbanUser{TargetUserID: 5})
	poll.Until(t, 30*time.Second, "the mute lifted in the group", poll.Bool(func() bool { _, ok := w.local.Muted("pm")["5"]; return !ok }))
}
