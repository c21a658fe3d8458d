package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/im"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
)

// refusing is an IM service that refuses every call for good.
type refusing struct{ im.GroupAPI }

func (refusing) BanGroupMember(context.Context, string, []string, uint32, string) error {
	return &im.PermanentError{Reason: "tencent_10004", Err: errors.New("invalid parameter")}
}

// TestIMStatus: an event group control terminated shows in "roomctl im
// status", counted by type and reason and listed with its room.
func TestIMStatus(t *testing.T) {
	bus, err := natsbus.Open(context.Background(), natsbus.Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	control := &im.Control{Bus: bus, API: refusing{}}
	go func() { defer wg.Done(); _ = control.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	err = bus.Publish(context.Background(), outbox.Record{EventID: "r1/3/0", RoomID: "r1", RoomVersion: 3,
		EventType: "RoomUserKicked", Payload: []byte(`{"user_id":5}`), CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	// Group control creates its consumer when it starts: until then im
	// status says so and exits 1. The terminated kick may show before the
	// consumer does.
	poll.Until(t, 30*time.Second, "im status to show the consumer and the terminated kick", func() error {
		code, stdout, stderr := roomctl(t, "im", "status", "-nats-url", bus.ClientURL())
		if code != 0 {
			return fmt.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		for _, want := range []string{"terminated RoomUserKicked tencent_10004\t1\n", "terminated\t1\n",
			"room=r1\tgroup=r1\tevent=r1/3/0\ttencent_10004\tinvalid parameter", "(max 10000)"} {
			if !strings.Contains(stdout, want) {
				return fmt.Errorf("im status lacks %q:\n%s", want, stdout)
			}
		}
		return nil
	})
}
