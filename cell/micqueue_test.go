package cell_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// queueRoom creates a room that requires approval, in which user 5 asked
// for seat 3 and the owner invited user 6 to any seat.
func queueRoom(t testing.TB, reg *cell.Registry, roomID string) {
	t.Helper()
	mustSubmit(t, reg, env(roomID, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8, MicApproval: true}))
	for _, u := range []int64{1, 5, 6} {
		mustSubmit(t, reg, env(roomID, fmt.Sprint("join-", u), u, &room.JoinRoom{}))
	}
	mustSubmit(t, reg, env(roomID, "ask-5", 5, &room.RequestMic{SeatIndex: 3}))
	mustSubmit(t, reg, env(roomID, "invite-6", 1, &room.InviteToMic{TargetUserID: 6, SeatIndex: room.AnySeat}))
}

// queueOf returns the users with a pending request and invitation in the
// room's live snapshot.
func queueOf(t testing.TB, reg *cell.Registry, roomID string) (requests, invites []int64) {
	t.Helper()
	snap, err := reg.Snapshot(context.Background(), roomID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.GetMicRequests() {
		requests = append(requests, e.GetUserId())
	}
	for _, e := range snap.GetMicInvites() {
		invites = append(invites, e.GetUserId())
	}
	return requests, invites
}

// expired returns the users whose entries the room's committed events say expired.
func expired(sink *recordSink, roomID string) (requests, invites []int64) {
	for _, d := range eventsOf[*room.RoomMicRequestChangedEvent](sink, roomID, room.EventRoomMicRequestChanged) {
		if d.Action == room.MicQueueExpired {
			requests = append(requests, d.UserID)
		}
	}
	for _, d := range eventsOf[*room.RoomMicInviteChangedEvent](sink, roomID, room.EventRoomMicInviteChanged) {
		if d.Action == room.MicQueueExpired {
			invites = append(invites, d.UserID)
		}
	}
	return requests, invites
}

// expiryCommands returns the ids of the room's logged ExpireMicQueue commands.
func expiryCommands(t testing.TB, repo store.Repository, roomID string) []string {
	t.Helper()
	recs, err := repo.ListCommandsAfter(context.Background(), roomID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		if r.CommandType == string(room.CmdExpireMicQueue) {
			ids = append(ids, r.CommandID)
		}
	}
	return ids
}

// TestMicQueueExpiresByALoggedCommand lets the invitation (30 s) and then
// the request (60 s) expire: each goes through a logged ExpireMicQueue whose
// events show the change, and the snapshot no longer lists it.
func TestMicQueueExpiresByALoggedCommand(t *testing.T) {
	stores(t, testMicQueueExpiresByALoggedCommand)
}

func testMicQueueExpiresByALoggedCommand(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	clock := &testClock{}
	sink := &recordSink{}
	cfg := cell.Config{TimerScanEvery: -1, Clock: clock.Now}
	reg := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, nil)
	queueRoom(t, reg, "mq")
	if req, inv := queueOf(t, reg, "mq"); len(req) != 1 || req[0] != 5 || len(inv) != 1 || inv[0] != 6 {
		t.Fatalf("queue: requests %v, invitations %v", req, inv)
	}
	inviteEnds := eventsOf[*room.RoomMicInviteChangedEvent](sink, "mq", room.EventRoomMicInviteChanged)[0].ExpiresAt

	// Past the invitation's end: any command sets the timer from the
	// stepped clock, and the wakeup expires the invitation alone.
	clock.set(time.UnixMilli(inviteEnds))
	mustSubmit(t, reg, env("mq", "join-7", 7, &room.JoinRoom{}))
	poll.Until(t, 10*time.Second, "the invitation expiring", poll.Bool(func() bool { _, inv := expired(sink, "mq"); return len(inv) == 1 }))
	if req, inv := queueOf(t, reg, "mq"); len(req) != 1 || len(inv) != 0 {
		t.Fatalf("after the invitation expired: requests %v, invitations %v", req, inv)
	}
	if req, _ := expired(sink, "mq"); len(req) != 0 {
		t.Fatalf("the request expired with the invitation: %v", req)
	}

	clock.jump(time.Duration(room.MicRequestTTL) * time.Millisecond)
	mustSubmit(t, reg, env("mq", "join-8", 8, &room.JoinRoom{}))
	poll.Until(t, 10*time.Second, "the request expiring", poll.Bool(func() bool { req, _ := expired(sink, "mq"); return len(req) == 1 }))
	if req, inv := queueOf(t, reg, "mq"); len(req)+len(inv) != 0 {
		t.Fatalf("after both expired: requests %v, invitations %v", req, inv)
	}
	if ids := expiryCommands(t, repo, "mq"); len(ids) != 2 || ids[0] != cell.MicExpiryCommandID(inviteEnds) {
		t.Fatalf("logged expiries %v, want two, the first %s", ids, cell.MicExpiryCommandID(inviteEnds))
	}
	// Nothing is left to expire: approving the expired request finds none.
	_, err := reg.Submit(context.Background(), env("mq", "approve", 1, &room.ApproveMicRequest{TargetUserID: 5}))
	if room.AsError(err).Reason != room.ErrNoMicRequest.Reason {
		t.Fatalf("approving an expired request: %v", err)
	}
}

// TestMicQueueSurvivesRecovery keeps the queue across a crash (the room is
// its log) and across a clean stop (a final snapshot), and a room loaded
// after its entries expired removes them at once, by a logged command.
func TestMicQueueSurvivesRecovery(t *testing.T) { stores(t, testMicQueueSurvivesRecovery) }

func testMicQueueSurvivesRecovery(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	clock := &testClock{}
	cfg := cell.Config{TimerScanEvery: -1, Clock: clock.Now}

	// A crash: no final snapshot, the next node replays the log.
	crashed := &cutRepo{Repository: repo}
	dead := newTimerRegistry(t, crashed, cfg, lease.NewLocal(), &recordSink{}, nil)
	queueRoom(t, dead, "mr")
	crashed.cut.Store(true)
	cfg.NodeID = "second"
	second := newTimerRegistry(t, repo, cfg, lease.NewLocal(), &recordSink{}, nil)
	if req, inv := queueOf(t, second, "mr"); len(req) != 1 || req[0] != 5 || len(inv) != 1 || inv[0] != 6 {
		t.Fatalf("after replaying the log: requests %v, invitations %v", req, inv)
	}

	// A clean stop stores a snapshot holding the queue.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	snap, found, err := repo.GetLatestSnapshot(ctx, "mr")
	if err != nil || !found {
		t.Fatalf("no snapshot after a clean stop: %v", err)
	}
	cfg.NodeID = "third"
	third := newTimerRegistry(t, repo, cfg, lease.NewLocal(), &recordSink{}, nil)
	if req, inv := queueOf(t, third, "mr"); len(req) != 1 || len(inv) != 1 {
		t.Fatalf("after loading the snapshot of version %d: requests %v, invitations %v", snap.RoomVersion, req, inv)
	}
	if err := third.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Loaded after both expired: one logged command removes both.
	clock.jump(2 * time.Duration(room.MicRequestTTL) * time.Millisecond)
	cfg.NodeID = "fourth"
	sink := &recordSink{}
	fourth := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, nil)
	if _, err := fourth.Snapshot(ctx, "mr"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the expiry on load", poll.Bool(func() bool {
		req, inv := expired(sink, "mr")
		return len(req) == 1 && len(inv) == 1
	}))
	if req, inv := queueOf(t, fourth, "mr"); len(req)+len(inv) != 0 {
		t.Fatalf("after the expiry: requests %v, invitations %v", req, inv)
	}
	if ids := expiryCommands(t, repo, "mr"); len(ids) != 1 {
		t.Fatalf("logged expiries %v, want one", ids)
	}
}
