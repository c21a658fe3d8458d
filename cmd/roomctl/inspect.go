package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/rpc"
)

func setupSnapshot(fs *flag.FlagSet) func(context.Context, *client, []string, io.Writer) error {
	members := fs.Int("members", 0, fmt.Sprintf("show at most N members (0: all, up to the %d GetRoomSnapshot lists at most)", rpc.MaxMemberLimit))
	return func(ctx context.Context, c *client, args []string, out io.Writer) error {
		if *members < 0 || *members > rpc.MaxMemberLimit {
			return usagef("-members must be 0..%d", rpc.MaxMemberLimit)
		}
		limit := int32(*members)
		if limit == 0 { // GetRoomSnapshot would list its default, not all
			limit = rpc.MaxMemberLimit
		}
		snap, err := liveSnapshot(ctx, c, args[0], limit)
		if err != nil {
			return err
		}
		return printJSON(out, snap)
	}
}

// liveSnapshot returns the room's live state with at most members members
// (0: the service's default, rpc.DefaultMemberLimit).
func liveSnapshot(ctx context.Context, c *client, roomID string, members int32) (*roomv1.RoomSnapshot, error) {
	resp, err := c.rooms.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID, MemberLimit: members}))
	if err != nil {
		return nil, fmt.Errorf("GetRoomSnapshot room=%s: %w", roomID, err)
	}
	if resp.Msg.GetSnapshot() == nil {
		return nil, fmt.Errorf("GetRoomSnapshot room=%s: the answer holds no snapshot", roomID)
	}
	return resp.Msg.GetSnapshot(), nil
}

func setupLog(fs *flag.FlagSet) func(context.Context, *client, []string, io.Writer) error {
	after := fs.Int64("after", 0, "only commands after room version V")
	limit := fs.Int("limit", 0, "print at most N commands (0: all)")
	return func(ctx context.Context, c *client, args []string, out io.Writer) error {
		if *after < 0 || *limit < 0 {
			return usagef("-after and -limit must not be negative")
		}
		return eachCommand(ctx, c, args[0], *after, *limit, func(e *roomv1.CommandLogEntry) error {
			_, err := fmt.Fprintf(out, "%d\t%s\t%s\t%s\t%s\n", e.GetRoomVersion(), e.GetCommandId(), e.GetCommandType(),
				time.UnixMilli(e.GetCreatedAtMs()).UTC().Format("2006-01-02T15:04:05.000Z07:00"), oneLine(e.GetPayloadJson()))
			return err
		})
	}
}

// oneLine keeps a payload on its log line.
func oneLine(payload string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(payload)); err != nil {
		return fmt.Sprintf("%q", payload)
	}
	return b.String()
}

// commandPage is how many commands one ListCommands call asks for.
const commandPage = 1000

// eachCommand pages through the room's command log after version after, in
// version order, calling fn for at most limit commands (0: all of them).
func eachCommand(ctx context.Context, c *client, roomID string, after int64, limit int, fn func(*roomv1.CommandLogEntry) error) error {
	seen := 0
	for limit == 0 || seen < limit {
		page := commandPage
		if limit > 0 {
			page = min(page, limit-seen)
		}
		resp, err := c.ops.ListCommands(ctx, connect.NewRequest(&roomv1.ListCommandsRequest{
			RoomId: roomID, AfterVersion: after, Limit: int32(page),
		}))
		if err != nil {
			return fmt.Errorf("ListCommands room=%s after=%d: %w", roomID, after, err)
		}
		cmds := resp.Msg.GetCommands()
		for _, e := range cmds {
			if err := fn(e); err != nil {
				return err
			}
		}
		seen += len(cmds)
		if len(cmds) == 0 {
			return nil
		}
		after = cmds[len(cmds)-1].GetRoomVersion()
		if after >= resp.Msg.GetHeadVersion() {
			return nil
		}
	}
	return nil
}

var statusByName = map[string]roomv1.RoomStatus{
	"":         roomv1.RoomStatus_ROOM_STATUS_UNSPECIFIED,
	"creating": roomv1.RoomStatus_ROOM_STATUS_CREATING,
	"open":     roomv1.RoomStatus_ROOM_STATUS_OPEN,
	"closed":   roomv1.RoomStatus_ROOM_STATUS_CLOSED,
}

var statusName = map[roomv1.RoomStatus]string{
	roomv1.RoomStatus_ROOM_STATUS_CREATING: "creating",
	roomv1.RoomStatus_ROOM_STATUS_OPEN:     "open",
	roomv1.RoomStatus_ROOM_STATUS_CLOSED:   "closed",
}

func setupRooms(fs *flag.FlagSet) func(context.Context, *client, []string, io.Writer) error {
	status := fs.String("status", "", "only rooms in this status: open, closed or creating")
	pageSize := fs.Int("page-size", 0, "rooms per ListRooms call, at most 500 (0: the server's default)")
	return func(ctx context.Context, c *client, _ []string, out io.Writer) error {
		want, ok := statusByName[*status]
		if !ok {
			return usagef("-status %q: want open, closed or creating", *status)
		}
		if *pageSize < 0 {
			return usagef("-page-size must not be negative")
		}
		held, err := holders(ctx, c)
		if err != nil {
			return fmt.Errorf("ListNodes: %w", err)
		}
		return eachRoom(ctx, c, want, int32(*pageSize), func(r *roomv1.RoomSummary) (bool, error) {
			st, ok := statusName[r.GetStatus()]
			if !ok {
				st = r.GetStatus().String()
			}
			// node is the node that last claimed the room (it took epoch);
			// held, in a fleet, the node holding its lease now: none once
			// that node handed it off, until a call brings it up again.
			line := fmt.Sprintf("%s\tstatus=%s version=%d owner=%d host=%d seats=%d mode=%q epoch=%d node=%q",
				r.GetRoomId(), st, r.GetRoomVersion(), r.GetOwnerUserId(), r.GetHostUserId(), r.GetSeatCount(),
				r.GetMode(), r.GetOwnerEpoch(), r.GetOwnerNode())
			if held != nil {
				line += fmt.Sprintf(" held=%q", held[r.GetRoomId()])
			}
			_, err := fmt.Fprintln(out, line)
			return true, err
		})
	}
}

// eachRoom pages through ListRooms in room id order, calling fn for every
// room until fn answers false.
func eachRoom(ctx context.Context, c *client, status roomv1.RoomStatus, pageSize int32, fn func(*roomv1.RoomSummary) (bool, error)) error {
	token := ""
	for {
		resp, err := c.rooms.ListRooms(ctx, connect.NewRequest(&roomv1.ListRoomsRequest{
			PageSize: pageSize, PageToken: token, Status: status,
		}))
		if err != nil {
			return fmt.Errorf("ListRooms: %w", err)
		}
		for _, r := range resp.Msg.GetRooms() {
			if more, err := fn(r); err != nil || !more {
				return err
			}
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return nil
		}
	}
}
