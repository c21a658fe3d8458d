package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// setupCluster registers "roomctl cluster": the fleet's nodes and the rooms
// each holds, as the node at -addr reads them from the fleet's Redis
// (ListNodes).
func setupCluster(fs *flag.FlagSet) func(ctx context.Context, c *client, args []string, out io.Writer) error {
	rooms := fs.Bool("rooms", false, "also list the room ids each node holds")
	return func(ctx context.Context, c *client, _ []string, out io.Writer) error {
		res, err := c.ops.ListNodes(ctx, connect.NewRequest(&roomv1.ListNodesRequest{RoomIds: *rooms}))
		if err != nil {
			return fmt.Errorf("ListNodes: %w", err)
		}
		if !res.Msg.GetFleet() {
			fmt.Fprintln(out, "single node (no redis_url): it holds every room")
		}
		fmt.Fprintln(out, "node\taddr\trooms\tdraining\theartbeat age")
		nodes := res.Msg.GetNodes()
		for _, n := range nodes {
			if n.GetGone() { // its leases outlive its membership until they expire
				fmt.Fprintf(out, "%s\t(gone)\t%d\t\t\n", n.GetNodeId(), n.GetRooms())
				continue
			}
			age := time.Since(time.UnixMilli(n.GetHeartbeatMs())).Round(time.Millisecond)
			fmt.Fprintf(out, "%s\t%s\t%d\t%v\t%s\n", n.GetNodeId(), n.GetAddr(), n.GetRooms(), n.GetDraining(), max(age, 0))
		}
		if *rooms && res.Msg.GetFleet() {
			for _, n := range nodes {
				if len(n.GetRoomIds()) > 0 {
					fmt.Fprintf(out, "%s:\t%s\n", n.GetNodeId(), strings.Join(n.GetRoomIds(), " "))
				}
			}
		}
		return nil
	}
}

// setupDrain registers "roomctl drain": the named node hands off its rooms
// and stays up as a router (Drain, sent through the node at -addr).
func setupDrain(*flag.FlagSet) func(ctx context.Context, c *client, args []string, out io.Writer) error {
	return func(ctx context.Context, c *client, args []string, out io.Writer) error {
		res, err := c.ops.Drain(ctx, connect.NewRequest(&roomv1.DrainRequest{NodeId: args[0]}))
		if err != nil {
			return fmt.Errorf("drain %s: %w", args[0], err)
		}
		_, err = fmt.Fprintf(out, "node %s is draining: %d rooms handed off\n", res.Msg.GetNodeId(), res.Msg.GetRoomsHandedOff())
		return err
	}
}

// holders returns the node holding each room's lease now, read with
// ListNodes; nil on a single node, which holds every room it serves, and
// for a caller without the operator scope ListNodes needs, which may still
// list the rooms.
func holders(ctx context.Context, c *client) (map[string]string, error) {
	res, err := c.ops.ListNodes(ctx, connect.NewRequest(&roomv1.ListNodesRequest{RoomIds: true}))
	if connect.CodeOf(err) == connect.CodePermissionDenied {
		return nil, nil
	}
	if err != nil || !res.Msg.GetFleet() {
		return nil, err
	}
	held := map[string]string{}
	for _, n := range res.Msg.GetNodes() {
		for _, id := range n.GetRoomIds() {
			held[id] = n.GetNodeId()
		}
	}
	return held, nil
}
