package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/store/mysql/mysqltest"
)

// startNode runs room-service in-process with the token, on addr, with args.
func startNode(t *testing.T, addr string, args ...string) {
	t.Helper()
	m := runDaemon(t, append([]string{"-listen", addr}, args...)...)
	t.Setenv("ROOM_ADDR", "http://"+m.Addr)
	t.Setenv("ROOM_TOKEN", testToken)
}

func TestClusterAndDrainOfASingleNode(t *testing.T) {
	startNode(t, "127.0.0.1:0", "-node-id", "solo")
	mustRun(t, "call", "CreateRoom", `{"room_id":"r1","command_id":"c1","operator_user_id":1,"owner_user_id":1,"seat_count":4}`)
	out := mustRun(t, "cluster")
	want := regexp.MustCompile(`^single node \(no redis_url\): it holds every room\nnode\taddr\trooms\tdraining\theartbeat age\nsolo\t127\.0\.0\.1:\d+\t1\tfalse\t[\d.]+m?s\n$`)
	if !want.MatchString(out) {
		t.Fatalf("cluster of a single node:\n%s", out)
	}
	if out := mustRun(t, "rooms"); !strings.HasPrefix(out, "r1\t") || strings.Contains(out, "held=") {
		t.Fatalf("rooms of a single node:\n%s", out)
	}
	code, _, errOut := roomctl(t, "drain", "solo")
	if code != exitFail || !strings.Contains(errOut, "code=failed_precondition reason=not_in_fleet") {
		t.Fatalf("drain of a single node: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := roomctl(t, "drain"); code != exitUsage || !strings.Contains(errOut, "usage: roomctl drain <node_id>") {
		t.Fatalf("drain without a node: exit %d\n%s", code, errOut)
	}
}

// TestClusterAndDrainInAFleet runs one node in fleet mode on the local
// MariaDB, NATS and Redis: cluster and rooms show the room it holds; drain
// hands it off, after which the node is listed as draining and the room as
// held by nobody, still last claimed by the node.
func TestClusterAndDrainInAFleet(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	dsn := mysqltest.DSN(t)
	id := rand.Text()[:8]
	// The node's own stream and subjects on the shared NATS server.
	stream, prefix := "rs_roomctl_"+id, "rs.roomctl."+strings.ToLower(id)
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // after the stream is deleted
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) }) // after the node stopped
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	node, roomID := "n-"+id, "ctl-"+id
	startNode(t, addr, "-mysql-dsn", dsn, "-nats-url", "nats://127.0.0.1:4222", "-nats-stream", stream, "-nats-subject-prefix", prefix,
		"-redis-url", "redis://127.0.0.1:6379/10", "-node-id", node, "-advertise-addr", addr, "-lease-ttl", "1s")
	mustRun(t, "call", "CreateRoom", fmt.Sprintf(`{"room_id":%q,"command_id":"c1","operator_user_id":1,"owner_user_id":1,"seat_count":4}`, roomID))

	line := func(out, prefix string) string {
		for l := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		return ""
	}
	out := mustRun(t, "cluster", "-rooms")
	if l := line(out, node+"\t"); !regexp.MustCompile(`^` + node + `\t` + regexp.QuoteMeta(addr) + `\t1\tfalse\t[\d.]+m?s$`).MatchString(l) {
		t.Fatalf("cluster: line of %s is %q:\n%s", node, l, out)
	}
	if l := line(out, node+":"); l != node+":\t"+roomID {
		t.Fatalf("cluster -rooms: rooms of %s are %q:\n%s", node, l, out)
	}
	if l := line(mustRun(t, "rooms"), roomID+"\t"); !strings.HasSuffix(l, fmt.Sprintf(` node=%q held=%q`, node, node)) {
		t.Fatalf("rooms: %q; want the room claimed and held by %s", l, node)
	}

	if got := mustRun(t, "drain", node); got != "node "+node+" is draining: 1 rooms handed off\n" {
		t.Fatalf("drain: %q", got)
	}
	out = mustRun(t, "cluster", "-rooms")
	if l := line(out, node+"\t"); !strings.Contains(l, "\t0\ttrue\t") || line(out, node+":") != "" {
		t.Fatalf("cluster after the drain:\n%s", out)
	}
	if l := line(mustRun(t, "rooms"), roomID+"\t"); !strings.HasSuffix(l, ` epoch=1 node="" held=""`) {
		t.Fatalf("rooms after the drain: %q; want the room released by %s (epoch 1, no node) and held by nobody", l, node)
	}
	if got := mustRun(t, "drain", node); got != "node "+node+" is draining: 0 rooms handed off\n" {
		t.Fatalf("second drain: %q", got)
	}
	code, _, errOut := roomctl(t, "drain", "nobody-"+id)
	if code != exitFail || !strings.Contains(errOut, "code=not_found reason=node_not_found") {
		t.Fatalf("drain of an unknown node: exit %d\n%s", code, errOut)
	}
}
