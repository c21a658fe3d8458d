package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	driver "github.com/go-sql-driver/mysql"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlite"
)

// The crash test re-runs this test binary as the service.
const childEnv = "ROOM_SERVICE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(Execute(os.Args[1:], os.Getenv))
	}
	os.Exit(m.Run())
}

// runMain starts the service in-process on a random loopback port.
func runMain(t *testing.T, dir string, args ...string) (*Main, roomv1connect.RoomServiceClient) {
	t.Helper()
	m := NewMain()
	if err := m.ParseFlags(append([]string{"-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0", "-data-dir", dir, "-log-level", "error"}, args...), func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("close the service: %v", err)
		}
	})
	return m, roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+m.Addr)
}

// serviceToken is a service token long enough to be accepted.
const serviceToken = "s3cret-s3cret-s3cret-s3cret-s3cret"

func TestServiceRestartsWithItsRoomsAndChecksTheToken(t *testing.T) {
	dir := t.TempDir()
	m, client := runMain(t, dir, "-token", serviceToken)
	ctx := context.Background()
	create := connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	if _, err := client.CreateRoom(ctx, create); connect.CodeOf(err) != connect.CodeUnauthenticated || rpc.Reason(err) != "unauthenticated" {
		t.Fatalf("without token: %v", err)
	}
	create.Header().Set(rpc.Authorization(serviceToken))
	res, err := client.CreateRoom(ctx, create)
	if err != nil || res.Msg.GetRoomVersion() != 1 {
		t.Fatalf("create: %v %v", res, err)
	}
	join := connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c2", OperatorUserId: 5, Nickname: "five"})
	join.Header().Set(rpc.Authorization(serviceToken))
	if _, err := client.JoinRoom(ctx, join); err != nil {
		t.Fatal(err)
	}
	// The durable facts reach the embedded JetStream through the relay.
	poll.Until(t, 30*time.Second, "RoomCreated and RoomUserJoined in the stream", func() error {
		info, err := m.bus.JetStream().Stream(ctx, m.bus.Stream())
		if err != nil {
			return err
		}
		if n := info.CachedInfo().State.Msgs; n != 2 {
			return fmt.Errorf("the stream holds %d messages, want 2", n)
		}
		return nil
	})
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}

	_, client = runMain(t, dir)
	snap, err := client.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "r1"}))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Msg.GetRoomVersion() != 2 || snap.Msg.GetSnapshot().GetMembers()[0].GetNickname() != "five" {
		t.Fatalf("after restart: %v", snap.Msg)
	}
	again, err := client.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "r1", KnownVersion: 2}))
	if err != nil || !again.Msg.GetNotModified() || again.Msg.GetSnapshot() != nil {
		t.Fatalf("known version: %v %v", again.Msg, err)
	}
	_, err = client.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: "r1", CommandId: "c3", OperatorUserId: 5, SeatIndex: 8}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || rpc.Reason(err) != "bad_seat_index" {
		t.Fatalf("bad seat: %v", err)
	}
}

func TestRefusesToExposeWithoutToken(t *testing.T) {
	m := NewMain()
	err := m.ParseFlags([]string{"-listen", "0.0.0.0:8080"}, func(string) string { return "" })
	if err == nil || !regexp.MustCompile(`not a loopback address`).MatchString(err.Error()) {
		t.Fatalf("got %v", err)
	}
}

var servingRe = regexp.MustCompile(`msg=serving addr=(\S+)`)

// startChild runs the service as a child process and returns its address.
func startChild(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	return startChildWith(t, dir, "-snapshot-every", "50")
}

type acked struct {
	room, command string
	version       int64
	user          int64
}

// loadThenKill runs workers goroutines that each call do(worker, i) for
// i = 0, 1, … until a call fails (the child died under it: that call's
// fate is unknown). Once enough calls were acknowledged it kills child
// with SIGKILL, waits for the workers and the child, and returns the
// acknowledged results; no progress within patience fails the test.
func loadThenKill[T any](t *testing.T, child *exec.Cmd, workers, enough int, patience time.Duration, do func(worker, i int) (T, error)) []T {
	t.Helper()
	var (
		mu      sync.Mutex
		acked   []T
		wg      sync.WaitGroup
		killed  = make(chan struct{})
		reached = make(chan struct{})
		once    sync.Once
	)
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-killed:
					return
				default:
				}
				res, err := do(w, i)
				if err != nil {
					return
				}
				mu.Lock()
				acked = append(acked, res)
				if len(acked) >= enough {
					once.Do(func() { close(reached) })
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-reached:
	case <-time.After(patience):
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		t.Fatalf("the load made no progress: %d of %d calls acknowledged", n, enough)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	close(killed)
	wg.Wait()
	_ = child.Wait()
	return acked
}

// TestCrashLosesNothingAcknowledged kills the service with SIGKILL under
// load; after a restart every acknowledged command is in the log at its
// version, nothing is applied twice and versions are gap-free.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	child, addr := startChild(t, dir)
	client := roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+addr)
	ctx := context.Background()
	const rooms = 8
	for r := range rooms {
		if _, err := client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{
			RoomId: fmt.Sprintf("crash-%d", r), CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10,
		})); err != nil {
			t.Fatal(err)
		}
	}
	done := loadThenKill(t, child, 16, 1500, 60*time.Second, func(w, i int) (acked, error) {
		roomID := fmt.Sprintf("crash-%d", w%rooms)
		user := int64(100 + w*100000 + i)
		id := fmt.Sprintf("w%d-%d", w, i)
		res, err := client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: id, OperatorUserId: user}))
		if err != nil {
			return acked{}, err
		}
		return acked{room: roomID, command: id, version: res.Msg.GetRoomVersion(), user: user}, nil
	})

	_, addr = startChild(t, dir)
	client = roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+addr)
	ops := roomv1connect.NewOperatorServiceClient(http.DefaultClient, "http://"+addr)
	logs := map[string]map[string]int64{}
	for r := range rooms {
		roomID := fmt.Sprintf("crash-%d", r)
		res, err := ops.ListCommands(ctx, connect.NewRequest(&roomv1.ListCommandsRequest{RoomId: roomID, Limit: 10000}))
		if err != nil {
			t.Fatal(err)
		}
		logs[roomID] = map[string]int64{}
		for i, c := range res.Msg.GetCommands() {
			if c.GetRoomVersion() != int64(i+1) {
				t.Fatalf("room %s: gap at row %d (version %d)", roomID, i, c.GetRoomVersion())
			}
			if _, dup := logs[roomID][c.GetCommandId()]; dup {
				t.Fatalf("room %s: command %s twice", roomID, c.GetCommandId())
			}
			logs[roomID][c.GetCommandId()] = c.GetRoomVersion()
		}
		snap, err := client.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID}))
		if err != nil {
			t.Fatal(err)
		}
		if got := snap.Msg.GetRoomVersion(); got != int64(len(res.Msg.GetCommands())) {
			t.Fatalf("room %s: live version %d, log has %d commands", roomID, got, len(res.Msg.GetCommands()))
		}
	}
	for _, a := range done {
		if v, ok := logs[a.room][a.command]; !ok || v != a.version {
			t.Fatalf("acknowledged %s/%s at version %d; the log has it at %d (present %v)", a.room, a.command, a.version, v, ok)
		}
	}
	// Retrying acknowledged commands applies nothing again.
	for _, a := range done[:50] {
		res, err := client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: a.room, CommandId: a.command, OperatorUserId: a.user}))
		if err != nil || res.Msg.GetRoomVersion() != a.version {
			t.Fatalf("retry of %s after the crash: %v %v, want version %d", a.command, res, err, a.version)
		}
	}
	t.Logf("%d commands acknowledged before SIGKILL, all present after restart", len(done))
}

// TestMySQLOutageFailsFastAndHeals runs the service on MySQL through a proxy,
// cuts the database away mid-run and brings it back: commands fail with
// unavailable while it is gone, the service heals by itself, and every
// acknowledged command is in the log exactly once.
func TestMySQLOutageFailsFastAndHeals(t *testing.T) {
	dsn := mysqltest.DSN(t)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := mysqltest.NewProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	cfg.Params = map[string]string{"readTimeout": "2s", "writeTimeout": "2s", "timeout": "1s"}
	m, client := runMain(t, t.TempDir(), "-mysql-dsn", cfg.FormatDSN(), "-commit-timeout", "2s")
	ctx := context.Background()
	if _, err := client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "o1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int64{"c1": 1}
	join := func(id string, user int64) (int64, error) {
		res, err := client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "o1", CommandId: id, OperatorUserId: user}))
		if err != nil {
			return 0, err
		}
		acked[id] = res.Msg.GetRoomVersion()
		return res.Msg.GetRoomVersion(), nil
	}
	if _, err := join("c2", 2); err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	for i := range 3 {
		_, err := join(fmt.Sprintf("down-%d", i), int64(10+i))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("while the database is away: got %v, want unavailable", err)
		}
	}

	proxy.Restore()
	// The service heals by itself: a retry of a failed command now commits.
	poll.Until(t, 30*time.Second, "the service to heal after the database came back", func() error {
		_, err := join("down-0", 10)
		return err
	})
	if _, err := join("c3", 3); err != nil {
		t.Fatal(err)
	}
	ops := roomv1connect.NewOperatorServiceClient(http.DefaultClient, "http://"+m.Addr)
	res, err := ops.ListCommands(ctx, connect.NewRequest(&roomv1.ListCommandsRequest{RoomId: "o1"}))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int64{}
	for i, c := range res.Msg.GetCommands() {
		if c.GetRoomVersion() != int64(i+1) {
			t.Fatalf("gap at row %d: version %d", i, c.GetRoomVersion())
		}
		if _, dup := seen[c.GetCommandId()]; dup {
			t.Fatalf("%s committed twice", c.GetCommandId())
		}
		seen[c.GetCommandId()] = c.GetRoomVersion()
	}
	for id, v := range acked {
		if seen[id] != v {
			t.Fatalf("acknowledged %s at %d, the log has %d", id, v, seen[id])
		}
	}
}

// TestStartsWhenMySQLComesUpLate starts the service while its database is
// unreachable: it keeps retrying instead of exiting, and serves once the
// database answers.
func TestStartsWhenMySQLComesUpLate(t *testing.T) {
	dsn := mysqltest.DSN(t)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := mysqltest.NewProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	proxy.Cut()
	m := NewMain()
	if err := m.ParseFlags([]string{"-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0", "-mysql-dsn", cfg.FormatDSN(), "-data-dir", t.TempDir(), "-log-level", "error"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	ran := make(chan error, 1)
	go func() { ran <- m.Run(context.Background()) }()
	select {
	case err := <-ran:
		t.Fatalf("Run returned while the database was away: %v", err)
	default:
	}
	proxy.Restore()
	if err := <-ran; err != nil {
		t.Fatalf("Run after the database came up: %v", err)
	}
	client := roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+m.Addr)
	if _, err := client.CreateRoom(context.Background(), connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "late", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
}

// TestZeroConfigShowsRoomMessagesOnTheLocalIMEndpoint follows a room through
// the zero-configuration IM: RoomCreated creates the group (through the
// outbox, JetStream and group control), a mic change and a robot display
// event show up in it, and /local/ lists them.
func TestZeroConfigShowsRoomMessagesOnTheLocalIMEndpoint(t *testing.T) {
	m, client := runMain(t, t.TempDir())
	ctx := context.Background()
	if _, err := client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "im1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	messages := func() string {
		res, err := http.Get("http://" + m.Addr + "/local/groups/im1/messages")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	// The group exists once group control created it; only then do messages land.
	poll.Until(t, 30*time.Second, "a join shown in the local group", func() error {
		if _, err := client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "im1", CommandId: fmt.Sprint("j", time.Now().UnixNano()), OperatorUserId: 5})); err != nil {
			t.Fatal(err)
		}
		if got := messages(); !strings.Contains(got, "RoomUserJoined") {
			return fmt.Errorf("the group shows %s", got)
		}
		return nil
	})
	if _, err := client.PublishRobotDisplay(ctx, connect.NewRequest(&roomv1.PublishRobotDisplayRequest{RoomId: "im1", EventType: "RoomGiftSent", PayloadJson: `{"gift_id":"rose"}`})); err != nil {
		t.Fatal(err)
	}
	_, err := client.PublishRobotDisplay(ctx, connect.NewRequest(&roomv1.PublishRobotDisplayRequest{RoomId: "im1", EventType: "bad type", PayloadJson: `{}`}))
	if rpc.Reason(err) != "invalid_argument" {
		t.Fatalf("bad robot event type: %v", err)
	}
	poll.Until(t, 30*time.Second, "the robot event in the local group", func() error {
		if got := messages(); !strings.Contains(got, "rose") {
			return fmt.Errorf("the group shows %s", got)
		}
		return nil
	})
	res, err := http.Get("http://" + m.Addr + "/local/")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("/local/: %v %v", res, err)
	}
	_ = res.Body.Close()
}

// TestTheLocalIMEndpointOutlastsTheAPIPortAtShutdown: a stopping
// zero-configuration service drains its rooms after its API port closed,
// and until the lane and group control stop they reach the local Tencent
// endpoint, as they would reach Tencent. What they did then is in the
// groups the endpoint stores for the next start.
func TestTheLocalIMEndpointOutlastsTheAPIPortAtShutdown(t *testing.T) {
	dir := t.TempDir()
	m, client := runMain(t, dir)
	ctx := context.Background()
	if _, err := client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "stop1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	var created error
	m.drained = func() {
		if _, err := http.Get("http://" + m.Addr + "/livez"); err == nil {
			t.Error("the API port still answers once the rooms are drained")
		}
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		created = m.timClient.CreateGroup(callCtx, "late-group", "")
	}
	closeCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := m.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if created != nil {
		t.Fatalf("a group created while the rooms drained: %v", created)
	}
	saved, err := os.ReadFile(filepath.Join(dir, "timlocal-groups.json"))
	if err != nil || !strings.Contains(string(saved), `"late-group"`) {
		t.Fatalf("the local endpoint's stored groups (%v): %s", err, saved)
	}
}

// TestSIGTERMDrainsAndStoresFinalSnapshots stops the service with SIGTERM:
// it exits cleanly and every room's snapshot is at its head, so the next
// start replays nothing.
func TestSIGTERMDrainsAndStoresFinalSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	child, addr := startChild(t, dir)
	client := roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+addr)
	ctx := context.Background()
	heads := map[string]int64{}
	for r := range 3 {
		id := fmt.Sprintf("term-%d", r)
		if _, err := client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: id, CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
			t.Fatal(err)
		}
		res, err := client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: id, CommandId: "j", OperatorUserId: 9}))
		if err != nil {
			t.Fatal(err)
		}
		heads[id] = res.Msg.GetRoomVersion()
	}
	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("the service did not exit cleanly on SIGTERM: %v", err)
	}
	db, err := sqlite.Open(ctx, filepath.Join(dir, "room.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	for id, head := range heads {
		snap, found, err := db.GetLatestSnapshot(ctx, id)
		if err != nil || !found || snap.RoomVersion != head {
			t.Fatalf("room %s: snapshot found=%v version=%d err=%v, want the head %d", id, found, snap.RoomVersion, err, head)
		}
	}
}
