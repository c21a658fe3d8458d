package im

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/room"
)

// GroupAPI is the part of Tencent IM that group control needs. Every call
// must be idempotent: creating an existing group, destroying a missing one,
// muting a muted member all succeed.
type GroupAPI interface {
	CreateGroup(ctx context.Context, groupID, name string) error
	DestroyGroup(ctx context.Context, groupID string) error
	ForbidSendMsg(ctx context.Context, groupID string, members []string, seconds uint32) error
	BanGroupMember(ctx context.Context, groupID string, members []string, seconds uint32, reason string) error
	UnbanGroupMember(ctx context.Context, groupID string, members []string) error
}

// Control drives the rooms' IM groups from the durable outbox, not from the
// best-effort lane: RoomCreated creates the group, RoomClosed destroys it,
// RoomUserMuted mutes (forbid_send_msg), RoomUserKicked bans and
// RoomUserUnbanned lifts the ban. It reads the durable events from
// JetStream with a durable consumer and acknowledges an event only after
// Tencent accepted the call, so a lost call is retried until it succeeds and
// a kicked user cannot keep chatting because a call failed.
type Control struct {
	Bus     *natsbus.Bus
	API     GroupAPI
	GroupOf func(roomID string) string
	// Durable is the consumer name (default "room-im-control").
	Durable string
	// MaxBackoff bounds the redelivery delay of a failing event (default 30s).
	MaxBackoff time.Duration
	Log        *slog.Logger
}

// Run consumes until ctx ends.
func (c *Control) Run(ctx context.Context) error {
	durable := c.Durable
	if durable == "" {
		durable = "room-im-control"
	}
	maxBackoff := c.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}
	groupOf := c.GroupOf
	if groupOf == nil {
		groupOf = func(id string) string { return id }
	}
	cons, err := c.Bus.JetStream().CreateOrUpdateConsumer(ctx, c.Bus.Stream(), jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait: 30 * time.Second, MaxDeliver: -1, FilterSubject: c.Bus.AllFilter(),
	})
	if err != nil {
		return fmt.Errorf("im control consumer: %w", err)
	}
	for ctx.Err() == nil {
		msgs, err := cons.Fetch(64, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, jetstream.ErrNoMessages) {
				c.Log.Warn("im control fetch", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		for msg := range msgs.Messages() {
			err := c.apply(ctx, groupOf, msg.Data())
			if err == nil {
				_ = msg.Ack()
				continue
			}
			meta, _ := msg.Metadata()
			tries := uint64(1)
			if meta != nil {
				tries = meta.NumDelivered
			}
			delay := min(time.Duration(1<<min(tries, 10))*100*time.Millisecond, maxBackoff)
			c.Log.Warn("im group control failed; retrying", "err", err, "attempt", tries, "retry_in", delay)
			_ = msg.NakWithDelay(delay)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// apply makes the one Tencent call an event needs; events that need none succeed.
func (c *Control) apply(ctx context.Context, groupOf func(string) string, data []byte) error {
	ev, err := natsbus.Decode(data)
	if err != nil {
		c.Log.Error("im control: undecodable event dropped", "err", err)
		return nil // a poison message would otherwise block the consumer forever
	}
	group := groupOf(ev.GetRoomId())
	payload := []byte(ev.GetPayloadJson())
	switch room.EventType(ev.GetEventType()) {
	case room.EventRoomCreated:
		var p room.RoomCreatedEvent
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil
		}
		name := p.Title
		if name == "" {
			name = ev.GetRoomId()
		}
		return c.API.CreateGroup(ctx, group, name)
	case room.EventRoomClosed:
		return c.API.DestroyGroup(ctx, group)
	case room.EventRoomUserMuted:
		var p room.RoomUserMutedEvent
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil
		}
		secs := uint32(0)
		if p.Muted {
			secs = untilSeconds(p.MutedUntil, ev.GetOccurredAtMs())
		}
		return c.API.ForbidSendMsg(ctx, group, []string{account(p.UserID)}, secs)
	case room.EventRoomUserKicked:
		var p room.RoomUserKickedEvent
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil
		}
		secs := uint32(foreverSeconds)
		if p.BannedUntil != 0 {
			secs = untilSeconds(p.BannedUntil, ev.GetOccurredAtMs())
		}
		return c.API.BanGroupMember(ctx, group, []string{account(p.UserID)}, secs, "kicked from the room")
	case room.EventRoomUserUnbanned:
		var p room.RoomUserUnbannedEvent
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil
		}
		return c.API.UnbanGroupMember(ctx, group, []string{account(p.UserID)})
	}
	return nil
}

// foreverSeconds is the longest ban: ten years.
const foreverSeconds = 10 * 365 * 24 * 3600

// untilSeconds is the time from the event to until, rounded up, at least 1.
func untilSeconds(untilMs, atMs int64) uint32 {
	return uint32(max((untilMs-atMs+999)/1000, 1))
}

// account is a user's Tencent IM identifier.
func account(user int64) string { return strconv.FormatInt(user, 10) }
