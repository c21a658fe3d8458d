package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"hyapp/room-service/lease/redislease"
)

// setupCluster registers "roomctl cluster": the fleet's nodes and the rooms
// each holds, read from the Redis the nodes share (not through a node, so
// it works while nodes are down).
func setupCluster(fs *flag.FlagSet) func(ctx context.Context, _ *client, args []string, out io.Writer) error {
	url := fs.String("redis-url", envOr("ROOM_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis of the fleet (env ROOM_REDIS_URL)")
	rooms := fs.Bool("rooms", false, "also list the room ids each node holds")
	return func(ctx context.Context, _ *client, _ []string, out io.Writer) error {
		opt, err := redis.ParseURL(*url)
		if err != nil {
			return usagef("-redis-url: %v", err)
		}
		rc := redis.NewClient(opt)
		defer rc.Close()
		members, err := redislease.Members(ctx, rc, redislease.Keys{})
		if err != nil {
			return err
		}
		leases, err := redislease.Leases(ctx, rc, redislease.Keys{})
		if err != nil {
			return err
		}
		held := map[string][]string{} // node id → room ids
		for id, o := range leases {
			if !strings.HasPrefix(id, "relay ") { // the relay's lease of a room
				held[o.NodeID] = append(held[o.NodeID], id)
			}
		}
		fmt.Fprintln(out, "node\taddr\trooms\tdraining\theartbeat age")
		listed := map[string]bool{}
		for _, m := range members {
			listed[m.NodeID] = true
			fmt.Fprintf(out, "%s\t%s\t%d\t%v\t%s\n", m.NodeID, m.Addr, len(held[m.NodeID]), m.Draining,
				time.Since(m.Heartbeat).Round(time.Millisecond))
		}
		nodes := make([]string, 0, len(held))
		for n := range held {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		for _, n := range nodes {
			if !listed[n] { // its leases outlive its membership until they expire
				fmt.Fprintf(out, "%s\t(gone)\t%d\t\t\n", n, len(held[n]))
			}
		}
		if *rooms {
			for _, n := range nodes {
				slices.Sort(held[n])
				fmt.Fprintf(out, "%s:\t%s\n", n, strings.Join(held[n], " "))
			}
		}
		return nil
	}
}
