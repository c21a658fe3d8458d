package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/poll"
)

// TestTheLobbyFollowsCommands: the service projects its rooms into the
// directory, the hot list shows a join within seconds, and the rows stay
// across a restart.
func TestTheLobbyFollowsCommands(t *testing.T) {
	dir := t.TempDir()
	m, client := runMain(t, dir)
	ctx := context.Background()
	for i, id := range []string{"quiet", "busy"} {
		if _, err := client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: id, CommandId: "c", OperatorUserId: 1,
			OwnerUserId: 1, SeatCount: 8, Region: "sa", Title: id})); err != nil {
			t.Fatal(err)
		}
		for u := range 1 + 2*i {
			if _, err := client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: id, CommandId: fmt.Sprint("j", u),
				OperatorUserId: int64(10 + u)})); err != nil {
				t.Fatal(err)
			}
		}
	}
	hot := func(client interface {
		ListRooms(context.Context, *connect.Request[roomv1.ListRoomsRequest]) (*connect.Response[roomv1.ListRoomsResponse], error)
	}) error {
		res, err := client.ListRooms(ctx, connect.NewRequest(&roomv1.ListRoomsRequest{OrderBy: roomv1.RoomOrder_ROOM_ORDER_ONLINE, Region: "sa"}))
		if err != nil {
			return err
		}
		rooms := res.Msg.GetRooms()
		if len(rooms) != 2 || rooms[0].GetRoomId() != "busy" || rooms[0].GetOnlineCount() != 3 || rooms[1].GetOnlineCount() != 1 {
			return fmt.Errorf("hot list %v", rooms)
		}
		return nil
	}
	poll.Until(t, 5*time.Second, "the hot list shows both rooms by members", func() error { return hot(client) })
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, client = runMain(t, dir)
	if err := hot(client); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}
