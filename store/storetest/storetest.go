// Package storetest is the one contract suite every store.Repository
// implementation runs. It asserts only through the Repository interface and
// the store sentinels (errors.Is), never on message text, and it gives every
// test rooms of its own, so it can run against a shared database.
package storetest

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

// Run runs the contract suite. newRepo returns the repository a subtest uses,
// and owns its cleanup (t.Cleanup); it may hand every subtest the same
// database. The subtests that delete or count across rooms (the prune tests,
// then the outbox stats test) run first, one at a time; the others then run
// in parallel. A shared database must hold no published outbox rows of
// others when Run starts: PruneOutbox deletes every row published before its
// cut and counts them. The stats test compares the counts before and after
// its own changes, and requeues every dead row.
func Run(t *testing.T, newRepo func(t *testing.T) store.Repository) {
	serial := []struct {
		name string
		fn   func(t *testing.T, repo store.Repository)
	}{
		{"PruneOutbox", testPruneOutbox},
		{"PruneCommands", testPruneCommands},
		{"PruneCommandsStopsAtTheFirstYoungRow", testPruneCommandsStopsAtTheFirstYoungRow},
		{"PruneOutboxStopsAtTheFirstYoungRow", testPruneOutboxStopsAtTheFirstYoungRow},
		{"OutboxStats", testOutboxStats},
	}
	for _, tc := range serial {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newRepo(t)) })
	}

	tests := []struct {
		name string
		fn   func(t *testing.T, repo store.Repository)
	}{
		{"RoomMeta", testRoomMeta},
		{"ClaimRoom", testClaimRoom},
		{"CommitBatches", testCommitBatches},
		{"CommitBatchesSameRoomTwice", testCommitBatchesSameRoomTwice},
		{"CommitBatchesVersionCheck", testCommitBatchesVersionCheck},
		{"CommitBatchesConcurrentSameBase", testCommitBatchesConcurrentSameBase},
		{"CommitBatchesStaleEpoch", testCommitBatchesStaleEpoch},
		{"CommitBatchesMixed", testCommitBatchesMixed},
		{"CommitBatchesDuplicateKeys", testCommitBatchesDuplicateKeys},
		{"CommitBatchesWithoutCommands", testCommitBatchesWithoutCommands},
		{"CommitBatchesMeta", testCommitBatchesMeta},
		{"CommitBatchesCreate", testCommitBatchesCreate},
		{"CommitBatchesRoles", testCommitBatchesRoles},
		{"CommitBatchesManyRooms", testCommitBatchesManyRooms},
		{"SnapshotNeverBackwards", testSnapshotNeverBackwards},
		{"SnapshotConcurrent", testSnapshotConcurrent},
		{"StopRooms", testStopRooms},
		{"IDsAreBytes", testIDsAreBytes},
		{"PayloadsAreBytes", testPayloadsAreBytes},
		{"ListCommandsAfter", testListCommandsAfter},
		{"ListCommandsPage", testListCommandsPage},
		{"GetCommands", testGetCommands},
		{"SaveCommand", testSaveCommand},
		{"Outbox", testOutbox},
		{"OutboxDuplicateEventID", testOutboxDuplicateEventID},
		{"ListOutboxHeads", testListOutboxHeads},
		{"ListRoomOutbox", testListRoomOutbox},
		{"FailOutbox", testFailOutbox},
		{"FailOutboxConcurrent", testFailOutboxConcurrent},
		{"MarkOutboxPublishedBatch", testMarkOutboxPublishedBatch},
		{"ListRooms", testListRooms},
		{"TimersDue", testTimersDue},
		{"TimersFencedOrRefused", testTimersFencedOrRefused},
		{"TimersDoneInTheSameCommit", testTimersDoneInTheSameCommit},
		{"DeleteTimers", testDeleteTimers},
		{"PutTimers", testPutTimers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newRepo(t))
		})
	}
}

// pendingLimit is large enough that, in a shared database, other tests'
// pending rows cannot hide this test's rows from ListOutboxHeads.
const pendingLimit = 100000

func testRoomMeta(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	if _, found, err := repo.GetRoomMeta(ctx, id); err != nil || found {
		t.Fatalf("GetRoomMeta(unknown) = found %v, err %v; want not found", found, err)
	}

	meta := testMeta(id)
	mustSaveMeta(t, repo, meta)
	if got := mustGetMeta(t, repo, id); got != meta {
		t.Fatalf("GetRoomMeta = %+v, want %+v", got, meta)
	}

	// Replacing is allowed while the room has no command, even once claimed.
	meta.OwnerUserID, meta.HostUserID, meta.SeatCount, meta.Mode, meta.Status = 11, 12, 10, "party", "open"
	mustSaveMeta(t, repo, meta)
	claim := mustClaim(t, repo, id, "node-a")
	meta.Mode = "radio"
	mustSaveMeta(t, repo, meta)
	if got := mustGetMeta(t, repo, id); got != meta {
		t.Fatalf("GetRoomMeta after replace = %+v, want %+v", got, meta)
	}
	if c := mustClaim(t, repo, id, "node-a"); c.Epoch != claim.Epoch+1 {
		t.Fatalf("replacing meta changed the owner epoch: claim epoch %d after %d", c.Epoch, claim.Epoch)
	}

	mustSaveCommand(t, repo, command(id, 1))
	replaced := meta
	replaced.Mode = "late"
	if err := repo.SaveRoomMeta(ctx, replaced); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("SaveRoomMeta after first command: err %v, want ErrConflict", err)
	}
	if got := mustGetMeta(t, repo, id); got != meta {
		t.Fatalf("GetRoomMeta after refused replace = %+v, want %+v", got, meta)
	}
}

func testClaimRoom(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	if _, err := repo.ClaimRoom(ctx, id, "node-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ClaimRoom(unknown): err %v, want ErrNotFound", err)
	}
	epochIs := func(want int64) {
		t.Helper()
		if got, found, err := repo.RoomOwnerEpoch(ctx, id); err != nil || !found || got != want {
			t.Fatalf("RoomOwnerEpoch = %d, %v, %v; want %d", got, found, err, want)
		}
	}
	if _, found, err := repo.RoomOwnerEpoch(ctx, id); err != nil || found {
		t.Fatalf("RoomOwnerEpoch(unknown): found %v, err %v", found, err)
	}

	meta := testMeta(id)
	mustSaveMeta(t, repo, meta)
	first := mustClaim(t, repo, id, "node-a")
	if first.Epoch <= 0 || first.HeadVersion != 0 || first.Meta != meta {
		t.Fatalf("first claim = %+v, want epoch > 0, head 0, meta %+v", first, meta)
	}
	epochIs(first.Epoch)
	info := mustRoomInfo(t, repo, id)
	if info.OwnerEpoch != first.Epoch || info.OwnerNode != "node-a" || info.HeadVersion != 0 {
		t.Fatalf("room info after claim = %+v, want epoch %d node node-a head 0", info, first.Epoch)
	}

	mustCommitOK(t, repo, newBatch(id, first.Epoch, 0, 3))
	second := mustClaim(t, repo, id, "node-b")
	if second.Epoch != first.Epoch+1 || second.HeadVersion != 3 || second.Meta != meta {
		t.Fatalf("second claim = %+v, want epoch %d, head 3, meta %+v", second, first.Epoch+1, meta)
	}
	epochIs(second.Epoch)
	info = mustRoomInfo(t, repo, id)
	if info.OwnerEpoch != second.Epoch || info.OwnerNode != "node-b" || info.HeadVersion != 3 {
		t.Fatalf("room info after second claim = %+v, want epoch %d node node-b head 3", info, second.Epoch)
	}
	if first.PreviousNode != "" || second.PreviousNode != "node-a" {
		t.Fatalf("previous nodes %q, %q; want none, then node-a (which did not release the room)", first.PreviousNode, second.PreviousNode)
	}

	// A clean stop is released: the next claim has no previous node, and
	// a release by an owner that lost the room changes nothing.
	if err := repo.StopRooms(ctx, []store.RoomStop{{RoomID: id, Release: true, Epoch: second.Epoch}}); err != nil {
		t.Fatalf("StopRooms: %v", err)
	}
	if info := mustRoomInfo(t, repo, id); info.OwnerNode != "" || info.OwnerEpoch != second.Epoch {
		t.Fatalf("room info after release = %+v, want no node at epoch %d", info, second.Epoch)
	}
	third := mustClaim(t, repo, id, "node-c")
	if third.PreviousNode != "" || third.Epoch != second.Epoch+1 {
		t.Fatalf("claim after a release = %+v, want no previous node, epoch %d", third, second.Epoch+1)
	}
	if err := repo.StopRooms(ctx, []store.RoomStop{{RoomID: id, Release: true, Epoch: second.Epoch}}); err != nil {
		t.Fatalf("StopRooms by a stale owner: %v", err)
	}
	if fourth := mustClaim(t, repo, id, "node-d"); fourth.PreviousNode != "node-c" {
		t.Fatalf("claim after a stale release: previous node %q, want node-c", fourth.PreviousNode)
	}
}

func testCommitBatches(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	if results, err := repo.CommitBatches(ctx, nil); err != nil || len(results) != 0 {
		t.Fatalf("CommitBatches(nil) = %v, %v; want no results, no error", results, err)
	}

	id, claim := newClaimedRoom(t, repo)
	b := newBatch(id, claim.Epoch, 0, 3)
	b.Outbox = nil
	for _, c := range b.Commands {
		b.Outbox = append(b.Outbox, event(id, c.RoomVersion, 0), event(id, c.RoomVersion, 1))
	}
	b.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: 3, Payload: []byte("snap-3"), CreatedAt: now()}
	b.Status = "closed"
	mustCommitOK(t, repo, b)

	assertCommands(t, mustListCommands(t, repo, id, 0), b.Commands)
	pending := mustPending(t, repo, id)
	if len(pending) != len(b.Outbox) {
		t.Fatalf("pending rows = %d, want %d", len(pending), len(b.Outbox))
	}
	for i, got := range pending {
		want := b.Outbox[i]
		if got.ID <= 0 || (i > 0 && got.ID <= pending[i-1].ID) {
			t.Fatalf("pending[%d].ID = %d, want positive and ascending", i, got.ID)
		}
		if got.EventID != want.EventID || got.RoomID != id || got.RoomVersion != want.RoomVersion ||
			got.Seq != want.Seq || got.EventType != want.EventType || !bytes.Equal(got.Payload, want.Payload) ||
			got.OwnerEpoch != claim.Epoch || got.Status != outbox.StatusPending || got.Attempts != 0 ||
			!got.CreatedAt.Equal(want.CreatedAt) || !got.PublishedAt.IsZero() {
			t.Fatalf("pending[%d] = %+v, want %+v with epoch %d, pending, 0 attempts", i, got, want, claim.Epoch)
		}
	}
	assertSnapshot(t, repo, id, 3, "snap-3")
	if got := mustGetMeta(t, repo, id); got.Status != "closed" {
		t.Fatalf("status after batch = %q, want closed", got.Status)
	}
	if info := mustRoomInfo(t, repo, id); info.HeadVersion != 3 {
		t.Fatalf("head after batch = %d, want 3", info.HeadVersion)
	}

	// An empty Status leaves the stored status alone.
	mustCommitOK(t, repo, newBatch(id, claim.Epoch, 3, 1))
	if got := mustGetMeta(t, repo, id); got.Status != "closed" {
		t.Fatalf("status after batch without status = %q, want closed", got.Status)
	}
	if info := mustRoomInfo(t, repo, id); info.HeadVersion != 4 {
		t.Fatalf("head after second batch = %d, want 4", info.HeadVersion)
	}
}

func testCommitBatchesSameRoomTwice(t *testing.T, repo store.Repository) {
	id, claim := newClaimedRoom(t, repo)
	first := newBatch(id, claim.Epoch, 0, 2)
	second := newBatch(id, claim.Epoch, 2, 3)
	mustCommitOK(t, repo, first, second)
	assertCommands(t, mustListCommands(t, repo, id, 0), append(first.Commands, second.Commands...))
	if info := mustRoomInfo(t, repo, id); info.HeadVersion != 5 {
		t.Fatalf("head = %d, want 5", info.HeadVersion)
	}
}

func testCommitBatchesVersionCheck(t *testing.T, repo store.Repository) {
	id, claim := newClaimedRoom(t, repo)

	gap := newBatch(id, claim.Epoch, 0, 3)
	gap.Commands[2].RoomVersion = 4
	late := newBatch(id, claim.Epoch, 0, 2)
	for i := range late.Commands {
		late.Commands[i].RoomVersion++
	}
	mustCommit(t, repo, []store.Batch{gap, late}, store.ErrConflict, store.ErrConflict)
	assertUntouched(t, repo, id, 0)

	mustCommitOK(t, repo, newBatch(id, claim.Epoch, 0, 2))
}

func testCommitBatchesConcurrentSameBase(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id, claim := newClaimedRoom(t, repo)

	const writers = 16
	results := make([]error, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			b := newBatch(id, claim.Epoch, 0, 2)
			for i := range b.Commands {
				b.Commands[i].CommandID = fmt.Sprintf("w%d-c%d", w, i)
			}
			for i := range b.Outbox {
				b.Outbox[i].EventID = fmt.Sprintf("%s/w%d/%d", id, w, i)
			}
			res, err := repo.CommitBatches(ctx, []store.Batch{b})
			errs[w] = err
			if err == nil {
				results[w] = res[0]
			}
		})
	}
	wg.Wait()

	winner := -1
	for w := range writers {
		if errs[w] != nil {
			t.Fatalf("writer %d: CommitBatches err %v", w, errs[w])
		}
		switch {
		case results[w] == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both committed at base 0", winner, w)
			}
			winner = w
		case !errors.Is(results[w], store.ErrFenced):
			t.Fatalf("writer %d: result %v, want ErrFenced", w, results[w])
		}
	}
	if winner < 0 {
		t.Fatal("no writer committed")
	}
	cmds := mustListCommands(t, repo, id, 0)
	if len(cmds) != 2 || cmds[0].CommandID != fmt.Sprintf("w%d-c0", winner) || cmds[1].CommandID != fmt.Sprintf("w%d-c1", winner) {
		t.Fatalf("log = %+v, want only writer %d's two commands", cmds, winner)
	}
	pending := mustPending(t, repo, id)
	if len(pending) != 2 {
		t.Fatalf("pending rows = %d, want the winner's 2", len(pending))
	}
	for _, r := range pending {
		if !strings.HasPrefix(r.EventID, fmt.Sprintf("%s/w%d/", id, winner)) {
			t.Fatalf("pending row %s is not writer %d's", r.EventID, winner)
		}
	}
}

func testCommitBatchesStaleEpoch(t *testing.T, repo store.Repository) {
	id, old := newClaimedRoom(t, repo)
	first := newBatch(id, old.Epoch, 0, 1)
	first.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: 1, Payload: []byte("snap-1"), CreatedAt: now()}
	mustCommitOK(t, repo, first)

	taken := mustClaim(t, repo, id, "node-b")
	if taken.HeadVersion != 1 {
		t.Fatalf("second claim head = %d, want 1", taken.HeadVersion)
	}

	stale := newBatch(id, old.Epoch, 1, 2)
	stale.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: 3, Payload: []byte("stale"), CreatedAt: now()}
	stale.Status = "closed"
	future := newBatch(id, taken.Epoch+1, 1, 2)
	mustCommit(t, repo, []store.Batch{stale, future}, store.ErrFenced, store.ErrFenced)

	if cmds := mustListCommands(t, repo, id, 1); len(cmds) != 0 {
		t.Fatalf("fenced batch wrote commands %+v", cmds)
	}
	for _, r := range mustPending(t, repo, id) {
		if r.RoomVersion > 1 {
			t.Fatalf("fenced batch wrote outbox row %+v", r)
		}
	}
	assertSnapshot(t, repo, id, 1, "snap-1")
	if got := mustGetMeta(t, repo, id); got.Status != testMeta(id).Status {
		t.Fatalf("fenced batch set status %q", got.Status)
	}
	if info := mustRoomInfo(t, repo, id); info.HeadVersion != 1 {
		t.Fatalf("head after fenced batch = %d, want 1", info.HeadVersion)
	}

	mustCommitOK(t, repo, newBatch(id, taken.Epoch, 1, 2))
}

func testCommitBatchesMixed(t *testing.T, repo store.Repository) {
	a, claimA := newClaimedRoom(t, repo)
	b, claimB := newClaimedRoom(t, repo)
	c, claimC := newClaimedRoom(t, repo)
	mustClaim(t, repo, b, "node-b") // claimB is stale now

	okA := newBatch(a, claimA.Epoch, 0, 2)
	staleB := newBatch(b, claimB.Epoch, 0, 2)
	okC := newBatch(c, claimC.Epoch, 0, 3)
	wrongBaseA := newBatch(a, claimA.Epoch, 5, 1)
	mustCommit(t, repo, []store.Batch{okA, staleB, okC, wrongBaseA}, nil, store.ErrFenced, nil, store.ErrFenced)

	assertCommands(t, mustListCommands(t, repo, a, 0), okA.Commands)
	assertCommands(t, mustListCommands(t, repo, c, 0), okC.Commands)
	if n := len(mustPending(t, repo, a)); n != len(okA.Outbox) {
		t.Fatalf("room a pending rows = %d, want %d", n, len(okA.Outbox))
	}
	if n := len(mustPending(t, repo, c)); n != len(okC.Outbox) {
		t.Fatalf("room c pending rows = %d, want %d", n, len(okC.Outbox))
	}
	assertUntouched(t, repo, b, 0)
}

func testCommitBatchesDuplicateKeys(t *testing.T, repo store.Repository) {
	a, claimA := newClaimedRoom(t, repo)
	b, claimB := newClaimedRoom(t, repo)
	mustCommitOK(t, repo, newBatch(a, claimA.Epoch, 0, 1))

	dupCommand := newBatch(a, claimA.Epoch, 1, 2)
	dupCommand.Commands[1].CommandID = command(a, 1).CommandID
	dupEvent := newBatch(b, claimB.Epoch, 0, 2)
	dupEvent.Outbox[1].EventID = event(a, 1, 0).EventID
	mustCommit(t, repo, []store.Batch{dupCommand, dupEvent}, store.ErrConflict, store.ErrConflict)
	assertUntouched(t, repo, b, 0)
	if info := mustRoomInfo(t, repo, a); info.HeadVersion != 1 {
		t.Fatalf("room a head = %d after a refused batch, want 1", info.HeadVersion)
	}
	if n := len(mustListCommands(t, repo, a, 0)); n != 1 {
		t.Fatalf("room a has %d commands after a refused batch, want 1", n)
	}

	// A refused batch does not spoil the others in the call.
	mustCommit(t, repo, []store.Batch{dupCommand, newBatch(b, claimB.Epoch, 0, 2)}, store.ErrConflict, nil)
}

// testStopRooms stops many rooms in one call: each gets its final
// snapshot, never backwards, and its release, which a room another node
// claimed since ignores.
func testStopRooms(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	if err := repo.StopRooms(ctx, nil); err != nil {
		t.Fatalf("StopRooms(nil): %v", err)
	}
	var stops []store.RoomStop
	claims := map[string]store.Claim{}
	for i := range 300 { // past a statement's releases (256 rooms)
		id, claim := newClaimedRoom(t, repo)
		mustCommitOK(t, repo, newBatch(id, claim.Epoch, 0, 3))
		claims[id] = claim
		st := store.RoomStop{RoomID: id, Release: i%4 != 3, Epoch: claim.Epoch}
		if i%5 != 4 {
			st.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: 3, Payload: []byte("final " + id), CreatedAt: now()}
		}
		stops = append(stops, st)
	}
	// One room has a newer snapshot already; another was claimed by a
	// node since, so its stale owner's release changes nothing.
	newer, taken := stops[0].RoomID, stops[1].RoomID
	if err := repo.SaveSnapshot(ctx, store.SnapshotRecord{RoomID: newer, RoomVersion: 9, Payload: []byte("nine"), CreatedAt: now()}); err != nil {
		t.Fatal(err)
	}
	next := mustClaim(t, repo, taken, "node-next")
	if err := repo.StopRooms(ctx, stops); err != nil {
		t.Fatalf("StopRooms: %v", err)
	}
	for _, st := range stops {
		switch {
		case st.RoomID == newer:
			assertSnapshot(t, repo, newer, 9, "nine")
		case st.Snapshot != nil:
			assertSnapshot(t, repo, st.RoomID, 3, "final "+st.RoomID)
		default:
			if _, found, err := repo.GetLatestSnapshot(ctx, st.RoomID); err != nil || found {
				t.Fatalf("room %s without a final snapshot: found %v, err %v", st.RoomID, found, err)
			}
		}
		info := mustRoomInfo(t, repo, st.RoomID)
		switch {
		case st.RoomID == taken:
			if info.OwnerNode != "node-next" || info.OwnerEpoch != next.Epoch {
				t.Fatalf("room %s claimed since: %+v, want node-next at epoch %d", taken, info, next.Epoch)
			}
		case st.Release && (info.OwnerNode != "" || info.OwnerEpoch != claims[st.RoomID].Epoch):
			t.Fatalf("released room %s: %+v, want no node at epoch %d", st.RoomID, info, claims[st.RoomID].Epoch)
		case !st.Release && info.OwnerNode == "":
			t.Fatalf("room %s not released: %+v, want its owner", st.RoomID, info)
		}
	}
}

func testSnapshotNeverBackwards(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	if _, found, err := repo.GetLatestSnapshot(ctx, id); err != nil || found {
		t.Fatalf("GetLatestSnapshot(none) = found %v, err %v; want not found", found, err)
	}
	save := func(version int64, payload string) {
		t.Helper()
		s := store.SnapshotRecord{RoomID: id, RoomVersion: version, Payload: []byte(payload), CreatedAt: now()}
		if err := repo.SaveSnapshot(ctx, s); err != nil {
			t.Fatalf("SaveSnapshot(v%d): %v", version, err)
		}
	}
	save(5, "five")
	save(3, "three")
	assertSnapshot(t, repo, id, 5, "five")
	save(7, "seven")
	assertSnapshot(t, repo, id, 7, "seven")
	save(7, "seven again") // the same version does not replace the stored one
	assertSnapshot(t, repo, id, 7, "seven")

	// Through batches.
	r, claim := newClaimedRoom(t, repo)
	first := newBatch(r, claim.Epoch, 0, 3)
	first.Snapshot = &store.SnapshotRecord{RoomID: r, RoomVersion: 3, Payload: []byte("three"), CreatedAt: now()}
	mustCommitOK(t, repo, first)
	older := newBatch(r, claim.Epoch, 3, 1)
	older.Snapshot = &store.SnapshotRecord{RoomID: r, RoomVersion: 2, Payload: []byte("two"), CreatedAt: now()}
	mustCommitOK(t, repo, older)
	assertSnapshot(t, repo, r, 3, "three")
	if err := repo.SaveSnapshot(ctx, store.SnapshotRecord{RoomID: r, RoomVersion: 1, Payload: []byte("one"), CreatedAt: now()}); err != nil {
		t.Fatalf("SaveSnapshot(older): %v", err)
	}
	assertSnapshot(t, repo, r, 3, "three")
	same := newBatch(r, claim.Epoch, 4, 1)
	same.Snapshot = &store.SnapshotRecord{RoomID: r, RoomVersion: 3, Payload: []byte("three again"), CreatedAt: now()}
	mustCommitOK(t, repo, same)
	assertSnapshot(t, repo, r, 3, "three")
	newer := newBatch(r, claim.Epoch, 5, 1)
	newer.Snapshot = &store.SnapshotRecord{RoomID: r, RoomVersion: 6, Payload: []byte("six"), CreatedAt: now()}
	mustCommitOK(t, repo, newer)
	assertSnapshot(t, repo, r, 6, "six")

	// Through one commit of many rooms: a room with no snapshot yet, one
	// whose stored snapshot is newer than the batch's, one with an older
	// one, and two batches of one room, each with its snapshot.
	rooms := make([]string, 4)
	claims := make([]store.Claim, 4)
	for i := range rooms {
		rooms[i], claims[i] = newClaimedRoom(t, repo)
	}
	seed := func(i int, version int64, payload string) store.Batch {
		b := newBatch(rooms[i], claims[i].Epoch, 0, 3)
		if version > 0 {
			b.Snapshot = &store.SnapshotRecord{RoomID: rooms[i], RoomVersion: version, Payload: []byte(payload), CreatedAt: now()}
		}
		return b
	}
	mustCommitOK(t, repo, seed(0, 0, ""), seed(1, 3, "stored 3"), seed(2, 1, "stored 1"), seed(3, 0, ""))
	snap := func(b store.Batch, version int64, payload string) store.Batch {
		b.Snapshot = &store.SnapshotRecord{RoomID: b.RoomID, RoomVersion: version, Payload: []byte(payload), CreatedAt: now()}
		return b
	}
	mustCommitOK(t, repo,
		snap(newBatch(rooms[0], claims[0].Epoch, 3, 1), 4, "first 4"),
		snap(newBatch(rooms[1], claims[1].Epoch, 3, 1), 2, "older 2"),
		snap(newBatch(rooms[2], claims[2].Epoch, 3, 2), 5, "newer 5"),
		snap(newBatch(rooms[3], claims[3].Epoch, 3, 1), 4, "one of two: 4"),
		snap(newBatch(rooms[3], claims[3].Epoch, 4, 2), 6, "two of two: 6"),
	)
	assertSnapshot(t, repo, rooms[0], 4, "first 4")
	assertSnapshot(t, repo, rooms[1], 3, "stored 3")
	assertSnapshot(t, repo, rooms[2], 5, "newer 5")
	assertSnapshot(t, repo, rooms[3], 6, "two of two: 6")
}

func testCommitBatchesManyRooms(t *testing.T, repo store.Repository) {
	// Enough rooms in one call that an implementation may fence them all at
	// once, given interleaved, with every way a batch can fail its fence.
	const n = 12
	ids := make([]string, n)
	claims := make([]store.Claim, n)
	for i := range ids {
		ids[i], claims[i] = newClaimedRoom(t, repo)
	}
	mustClaim(t, repo, ids[1], "node-b") // claims[1] is stale now
	missing := newRoomID(t)

	var batches []store.Batch
	var want []error
	add := func(b store.Batch, w error) {
		batches = append(batches, b)
		want = append(want, w)
	}
	epoch := func(i int) int64 { return claims[i].Epoch }
	r3b := newBatch(ids[3], epoch(3), 1, 2)
	r3b.Status = "closed"
	r5 := newBatch(ids[5], epoch(5), 0, 1)
	r5.Status = "closed"
	// Refused batches carry ids of their own, so that one wrongly let
	// through would write rows rather than fail on a duplicate key.
	behind := newBatch(ids[4], epoch(4), 0, 1)
	behind.Commands[0].CommandID, behind.Outbox[0].EventID = "behind", ids[4]+"/behind"

	for i := n - 1; i >= 6; i-- {
		add(newBatch(ids[i], epoch(i), 0, 1), nil)
	}
	add(newBatch(ids[3], epoch(3), 0, 1), nil)
	add(newBatch(ids[4], epoch(4), 0, 1), nil)
	add(newBatch(ids[1], epoch(1), 0, 1), store.ErrFenced) // stale epoch
	add(r3b, nil)                                          // sees ids[3]'s first batch
	add(behind, store.ErrFenced)                           // its base is behind now
	add(newBatch(missing, 1, 0, 1), store.ErrFenced)       // no such room
	add(newBatch(ids[2], epoch(2), 3, 1), store.ErrFenced) // wrong base
	add(newBatch(ids[4], epoch(4), 1, 2), nil)             // after the refused one
	add(r5, nil)
	add(newBatch(ids[3], epoch(3), 3, 1), nil)
	add(newBatch(ids[0], epoch(0), 0, 2), nil)
	add(store.Batch{RoomID: ids[6], OwnerEpoch: epoch(6), BaseVersion: 1}, nil) // no commands
	mustCommit(t, repo, batches, want...)

	heads := []int64{2, 0, 0, 4, 3, 1, 1, 1, 1, 1, 1, 1}
	for i, id := range ids {
		if info := mustRoomInfo(t, repo, id); info.HeadVersion != heads[i] {
			t.Fatalf("room %d head = %d, want %d", i, info.HeadVersion, heads[i])
		}
		status := testMeta(id).Status
		if i == 3 || i == 5 {
			status = "closed"
		}
		if got := mustGetMeta(t, repo, id); got.Status != status {
			t.Fatalf("room %d status = %q, want %q", i, got.Status, status)
		}
		if cmds := mustListCommands(t, repo, id, 0); int64(len(cmds)) != heads[i] {
			t.Fatalf("room %d has %d commands, want %d", i, len(cmds), heads[i])
		}
		if rows := mustPending(t, repo, id); int64(len(rows)) != heads[i] {
			t.Fatalf("room %d has %d pending rows, want %d", i, len(rows), heads[i])
		}
	}
	if _, found, err := repo.GetRoomMeta(t.Context(), missing); err != nil || found {
		t.Fatalf("the missing room exists after a fenced batch: found %v, err %v", found, err)
	}
}

// A batch with Meta replaces the room's owner, host, seat count and mode
// (the batch holding CreateRoom), with its status; a fenced one changes nothing.
func testCommitBatchesMeta(t *testing.T, repo store.Repository) {
	id, claim := newClaimedRoom(t, repo)
	b := newBatch(id, claim.Epoch, claim.HeadVersion, 1)
	b.Status = "open"
	b.Meta = &store.RoomMeta{RoomID: id, OwnerUserID: 77, HostUserID: 78, SeatCount: 15, Mode: "party"}
	stale := newBatch(id, claim.Epoch-1, claim.HeadVersion+1, 1)
	stale.Meta = &store.RoomMeta{RoomID: id, OwnerUserID: 99, SeatCount: 3}
	mustCommit(t, repo, []store.Batch{b, stale}, nil, store.ErrFenced)
	got := mustGetMeta(t, repo, id)
	want := store.RoomMeta{RoomID: id, OwnerUserID: 77, HostUserID: 78, SeatCount: 15, Mode: "party", Status: "open"}
	if got != want {
		t.Fatalf("meta after the batch: %+v, want %+v", got, want)
	}
}

// A batch with CreatedBy inserts its room's row, claimed by that node at the
// batch's epoch, and commits like any other; a room that exists fences it,
// and the room's later batches in the call, writing nothing, while the other
// batches commit. The same holds when a duplicate key elsewhere in the call
// makes the batches commit one by one.
func testCommitBatchesCreate(t *testing.T, repo store.Repository) {
	creating := func(id string, n int) store.Batch {
		b := newBatch(id, 1, 0, n)
		b.Status, b.CreatedBy = "open", "node-c"
		b.Meta = &store.RoomMeta{RoomID: id, OwnerUserID: 77, HostUserID: 78, SeatCount: 15, Mode: "party"}
		return b
	}
	// Rooms that do not exist yet: one statement inserts them all.
	var many []store.Batch
	for i := range 5 {
		many = append(many, creating(newRoomID(t), i+1))
	}
	mustCommitOK(t, repo, many...)
	for i, b := range many {
		got := mustGetMeta(t, repo, b.RoomID)
		if w := (store.RoomMeta{RoomID: b.RoomID, OwnerUserID: 77, HostUserID: 78, SeatCount: 15, Mode: "party", Status: "open"}); got != w {
			t.Fatalf("created room %d: %+v, want %+v", i, got, w)
		}
		if info := mustRoomInfo(t, repo, b.RoomID); info.HeadVersion != int64(i+1) || info.OwnerEpoch != 1 || info.OwnerNode != "node-c" {
			t.Fatalf("created room %d: head %d epoch %d node %q, want %d, 1, node-c", i, info.HeadVersion, info.OwnerEpoch, info.OwnerNode, i+1)
		}
	}
	// More rooms than one statement takes, the one that exists sorting
	// last: the rooms before its statement are created, once.
	base := newRoomID(t)
	lots := make([]store.Batch, 0, 300)
	for i := range 300 {
		lots = append(lots, creating(fmt.Sprintf("%s-%03d", base, i), 1))
	}
	existing := lots[len(lots)-1].RoomID
	mustSaveMeta(t, repo, testMeta(existing))
	mustClaim(t, repo, existing, "node-a")
	want := make([]error, len(lots))
	want[len(want)-1] = store.ErrFenced
	mustCommit(t, repo, lots, want...)
	for _, b := range lots[:len(lots)-1] {
		if info := mustRoomInfo(t, repo, b.RoomID); info.HeadVersion != 1 || info.OwnerEpoch != 1 {
			t.Fatalf("created room %s: head %d epoch %d, want 1, 1", b.RoomID, info.HeadVersion, info.OwnerEpoch)
		}
	}
	assertUntouched(t, repo, existing, 0)
	for _, isolated := range []bool{false, true} {
		fresh, taken, other := newRoomID(t), newRoomID(t), newRoomID(t)
		mustSaveMeta(t, repo, testMeta(taken))
		takenClaim := mustClaim(t, repo, taken, "node-a") // epoch 1, head 0: what a fresh batch expects
		mustSaveMeta(t, repo, testMeta(other))
		otherClaim := mustClaim(t, repo, other, "node-a")
		mustCommitOK(t, repo, newBatch(other, otherClaim.Epoch, 0, 1))

		otherNext := newBatch(other, otherClaim.Epoch, 1, 1)
		if isolated { // a duplicate command id: refused alone, after the merged attempt
			otherNext.Commands[0].CommandID = command(other, 1).CommandID
		}
		takenNext := newBatch(taken, 1, 1, 1)
		takenNext.Commands[0].CommandID, takenNext.Outbox[0].EventID = "taken-next", taken+"/next"
		want := error(nil)
		if isolated {
			want = store.ErrConflict
		}
		// Four rooms pass: enough for a database that fences them in bulk.
		more, most := newRoomID(t), newRoomID(t)
		first, next := creating(fresh, 2), newBatch(fresh, 1, 2, 1)
		mustCommit(t, repo, []store.Batch{first, creating(taken, 1), creating(more, 1), takenNext, otherNext, next, creating(most, 1)},
			nil, store.ErrFenced, nil, store.ErrFenced, want, nil, nil)
		for _, id := range []string{more, most} {
			if info := mustRoomInfo(t, repo, id); info.HeadVersion != 1 || info.OwnerEpoch != 1 {
				t.Fatalf("created room: head %d epoch %d, want 1, 1", info.HeadVersion, info.OwnerEpoch)
			}
		}

		got := mustGetMeta(t, repo, fresh)
		if w := (store.RoomMeta{RoomID: fresh, OwnerUserID: 77, HostUserID: 78, SeatCount: 15, Mode: "party", Status: "open"}); got != w {
			t.Fatalf("created room: %+v, want %+v", got, w)
		}
		if info := mustRoomInfo(t, repo, fresh); info.HeadVersion != 3 || info.OwnerEpoch != 1 || info.OwnerNode != "node-c" {
			t.Fatalf("created room: head %d epoch %d node %q, want 3, 1, node-c", info.HeadVersion, info.OwnerEpoch, info.OwnerNode)
		}
		assertCommands(t, mustListCommands(t, repo, fresh, 0), append(first.Commands, next.Commands...))
		assertUntouched(t, repo, taken, 0)
		if claim := mustClaim(t, repo, taken, "node-a"); claim.Epoch != takenClaim.Epoch+1 {
			t.Fatalf("the existing room's epoch moved to %d", claim.Epoch-1)
		}
	}
	ctx := t.Context()
	bad := creating(newRoomID(t), 1)
	bad.Meta = nil
	if results, err := repo.CommitBatches(ctx, []store.Batch{bad}); err != nil || !errors.Is(results[0], store.ErrConflict) {
		t.Fatalf("a creating batch without metadata: %v, %v; want ErrConflict", results, err)
	}
	if _, found, err := repo.GetRoomMeta(ctx, bad.RoomID); err != nil || found {
		t.Fatalf("a refused creating batch left a room: found %v, err %v", found, err)
	}
}

// A batch with Roles replaces the room's owner and host and nothing else;
// a fenced one changes nothing.
func testCommitBatchesRoles(t *testing.T, repo store.Repository) {
	id, claim := newClaimedRoom(t, repo)
	before := mustGetMeta(t, repo, id)
	b := newBatch(id, claim.Epoch, claim.HeadVersion, 1)
	b.Roles = &store.RoomRoles{OwnerUserID: 55, HostUserID: 0}
	stale := newBatch(id, claim.Epoch-1, claim.HeadVersion+1, 1)
	stale.Roles = &store.RoomRoles{OwnerUserID: 99, HostUserID: 98}
	mustCommit(t, repo, []store.Batch{b, stale}, nil, store.ErrFenced)
	want := before
	want.OwnerUserID, want.HostUserID = 55, 0
	if got := mustGetMeta(t, repo, id); got != want {
		t.Fatalf("meta after the batch: %+v, want %+v", got, want)
	}
}

func testCommitBatchesWithoutCommands(t *testing.T, repo store.Repository) {
	// A batch that carries no command leaves the head where it is; the fence
	// must still pass, however little the UPDATE of the rooms row changes,
	// and again at once.
	id, claim := newClaimedRoom(t, repo)
	for range 3 {
		mustCommitOK(t, repo, store.Batch{RoomID: id, OwnerEpoch: claim.Epoch, BaseVersion: 0, Status: "closed"})
	}
	mustCommitOK(t, repo, store.Batch{RoomID: id, OwnerEpoch: claim.Epoch, BaseVersion: 0},
		store.Batch{RoomID: id, OwnerEpoch: claim.Epoch, BaseVersion: 0})
	if got := mustGetMeta(t, repo, id); got.Status != "closed" {
		t.Fatalf("status = %q, want closed", got.Status)
	}
	mustCommit(t, repo, []store.Batch{{RoomID: id, OwnerEpoch: claim.Epoch, BaseVersion: 1}}, store.ErrFenced)
	mustCommitOK(t, repo, newBatch(id, claim.Epoch, 0, 1))
}

func testSnapshotConcurrent(t *testing.T, repo store.Repository) {
	// Writers race to store the first snapshot and then newer ones; a reader
	// never sees the version go down, and the highest version wins.
	ctx := t.Context()
	id := newRoomID(t)
	const writers, perWriter = 8, 12
	stop := make(chan struct{})
	readerErr := make(chan error, 1)
	go func() {
		var last int64
		for {
			select {
			case <-stop:
				readerErr <- nil
				return
			default:
			}
			s, found, err := repo.GetLatestSnapshot(ctx, id)
			if err != nil {
				readerErr <- err
				return
			}
			if found {
				if s.RoomVersion < last || string(s.Payload) != fmt.Sprintf("v%d", s.RoomVersion) {
					readerErr <- fmt.Errorf("read v%d %q after v%d", s.RoomVersion, s.Payload, last)
					return
				}
				last = s.RoomVersion
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				v := int64(1 + w + i*writers)
				s := store.SnapshotRecord{RoomID: id, RoomVersion: v, Payload: fmt.Appendf(nil, "v%d", v), CreatedAt: now()}
				if err := repo.SaveSnapshot(ctx, s); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-readerErr; err != nil {
		t.Fatalf("reader: %v", err)
	}
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: SaveSnapshot: %v", w, err)
		}
	}
	top := int64(writers * perWriter)
	assertSnapshot(t, repo, id, top, fmt.Sprintf("v%d", top))
}

func testIDsAreBytes(t *testing.T, repo store.Repository) {
	// Ids compare byte for byte: no case folding, no trailing-space padding.
	ctx := t.Context()
	base := newRoomID(t)
	ids := []string{base, strings.ToUpper(base), base + " "}
	for i, id := range ids {
		meta := testMeta(id)
		meta.SeatCount = int32(i + 1)
		mustSaveMeta(t, repo, meta)
	}
	for i, id := range ids {
		if got := mustGetMeta(t, repo, id); got.SeatCount != int32(i+1) {
			t.Fatalf("room %q has seat count %d, want %d: ids that differ in bytes share a row", id, got.SeatCount, i+1)
		}
	}

	claim := mustClaim(t, repo, base, "node-a")
	b := newBatch(base, claim.Epoch, 0, 2)
	b.Commands[0].CommandID, b.Commands[1].CommandID = "cmd-x", "CMD-X"
	b.Outbox[0].EventID, b.Outbox[1].EventID = base+"/ev-x", base+"/EV-X"
	mustCommitOK(t, repo, b)
	for _, want := range b.Commands {
		got, found, err := repo.GetCommand(ctx, base, want.CommandID)
		if err != nil || !found {
			t.Fatalf("GetCommand(%q) = found %v, err %v", want.CommandID, found, err)
		}
		assertCommands(t, []store.CommandRecord{got}, []store.CommandRecord{want})
	}
	if _, found, err := repo.GetCommand(ctx, base, "Cmd-X"); err != nil || found {
		t.Fatalf("GetCommand(Cmd-X) = found %v, err %v; want not found", found, err)
	}
	if ids := eventIDs(mustPending(t, repo, base)); !slices.Equal(ids, eventIDs(b.Outbox)) {
		t.Fatalf("pending = %v, want %v", ids, eventIDs(b.Outbox))
	}
}

func testPayloadsAreBytes(t *testing.T, repo store.Repository) {
	// Payloads come back exactly as written: idempotent retries compare them
	// byte for byte, so no JSON normalisation, no charset conversion.
	ctx := t.Context()
	id, claim := newClaimedRoom(t, repo)
	payloads := [][]byte{
		[]byte(`{"b":1,  "a":2, "a":3}`),
		{0x00, 0xff, 0xfe, '\'', '"', '\\', 0x80, '\n'},
		[]byte("{\"name\":\"\u00e9\u4e2d\U0001F600\"} "),
		bytes.Repeat([]byte{0xC3}, 70000), // above 64 KiB, invalid UTF-8
	}
	b := newBatch(id, claim.Epoch, 0, len(payloads))
	for i, p := range payloads {
		b.Commands[i].Payload = p
		b.Outbox[i].Payload = p
	}
	b.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: 1, Payload: payloads[1], CreatedAt: now()}
	mustCommitOK(t, repo, b)

	assertCommands(t, mustListCommands(t, repo, id, 0), b.Commands)
	got, _, err := repo.GetCommand(ctx, id, b.Commands[0].CommandID)
	if err != nil || !bytes.Equal(got.Payload, payloads[0]) {
		t.Fatalf("GetCommand payload = %q, %v; want %q", got.Payload, err, payloads[0])
	}
	pending := mustPending(t, repo, id)
	if len(pending) != len(payloads) {
		t.Fatalf("pending rows = %d, want %d", len(pending), len(payloads))
	}
	for i, r := range pending {
		if !bytes.Equal(r.Payload, payloads[i]) {
			t.Fatalf("outbox payload %d = %q, want %q", i, r.Payload, payloads[i])
		}
	}
	s, found, err := repo.GetLatestSnapshot(ctx, id)
	if err != nil || !found || !bytes.Equal(s.Payload, payloads[1]) {
		t.Fatalf("snapshot payload = %q (found %v, err %v), want %q", s.Payload, found, err, payloads[1])
	}
}

func testPruneCommands(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	old := now().Add(-2 * time.Hour)
	cut := now().Add(-time.Hour) // only this test writes rows older than this
	oldBatch := func(id string, claim store.Claim, base int64, n int, snapshot int64) store.Batch {
		b := newBatch(id, claim.Epoch, base, n)
		for i := range b.Commands {
			b.Commands[i].CreatedAt = old
		}
		if snapshot > 0 {
			b.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: snapshot, Payload: []byte("snap"), CreatedAt: old}
		}
		return b
	}

	// a: v1-v4 old, v5-v10 new, snapshot at 8. With 3 versions kept, v1-v5
	// are below it far enough, and v1-v4 old enough.
	a, claimA := newClaimedRoom(t, repo)
	recent := newBatch(a, claimA.Epoch, 4, 6)
	recent.Snapshot = &store.SnapshotRecord{RoomID: a, RoomVersion: 8, Payload: []byte("snap"), CreatedAt: now()}
	mustCommitOK(t, repo, oldBatch(a, claimA, 0, 4, 0), recent)
	// b: old, no snapshot: keeps everything.
	b, claimB := newClaimedRoom(t, repo)
	mustCommitOK(t, repo, oldBatch(b, claimB, 0, 6, 0))
	// c: old, snapshot at its head.
	c, claimC := newClaimedRoom(t, repo)
	mustCommitOK(t, repo, oldBatch(c, claimC, 0, 3, 3))

	if n, err := repo.PruneCommands(ctx, 3, cut, 0); err != nil || n != 0 {
		t.Fatalf("PruneCommands(limit 0) = %d, %v; want 0", n, err)
	}
	const limit = 3
	total := 0
	for call := 0; ; call++ {
		if call > 4 {
			t.Fatal("PruneCommands did not run dry")
		}
		n, err := repo.PruneCommands(ctx, 3, cut, limit)
		if err != nil {
			t.Fatalf("PruneCommands: %v", err)
		}
		if n > limit {
			t.Fatalf("PruneCommands(limit %d) deleted %d rows", limit, n)
		}
		total += n
		if n < limit {
			break
		}
	}
	if total != 4 {
		t.Fatalf("PruneCommands deleted %d rows in all, want 4 (room a's v1-v4)", total)
	}
	wantA := recent.Commands
	assertCommands(t, mustListCommands(t, repo, a, 0), wantA)
	if _, found, err := repo.GetCommand(ctx, a, command(a, 1).CommandID); err != nil || found {
		t.Fatalf("GetCommand(pruned) = found %v, err %v; want not found", found, err)
	}
	if n := len(mustListCommands(t, repo, b, 0)); n != 6 {
		t.Fatalf("room b without snapshot has %d commands after pruning, want 6", n)
	}
	if n := len(mustListCommands(t, repo, c, 0)); n != 3 {
		t.Fatalf("room c has %d commands after pruning with 3 kept, want 3", n)
	}

	// "At least keepVersions below": 1 kept prunes c's v1-v2, 0 its v3 too.
	for _, step := range []struct {
		keep     int64
		deleted  int
		cCommand int
	}{{1, 2, 1}, {0, 1, 0}} {
		n, err := repo.PruneCommands(ctx, step.keep, cut, 100)
		if err != nil || n != step.deleted {
			t.Fatalf("PruneCommands(keep %d) = %d, %v; want %d", step.keep, n, err, step.deleted)
		}
		if cmds := mustListCommands(t, repo, c, 0); len(cmds) != step.cCommand {
			t.Fatalf("room c after PruneCommands(keep %d) has %+v, want %d commands", step.keep, cmds, step.cCommand)
		}
	}
	assertSnapshot(t, repo, c, 3, "snap")
	assertCommands(t, mustListCommands(t, repo, a, 0), wantA)
	if n, err := repo.PruneCommands(ctx, 0, cut, 100); err != nil || n != 0 {
		t.Fatalf("PruneCommands again = %d, %v; want 0", n, err)
	}
}

// testPruneCommandsStopsAtTheFirstYoungRow: a room's log is pruned up to
// its first row written after the cut, even when an older row follows it
// (two nodes' clocks), and below its snapshot as always: retention reads
// the log only that far.
func testPruneCommandsStopsAtTheFirstYoungRow(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id, claim := newClaimedRoom(t, repo)
	cut := now().Add(-time.Hour)
	old, young := cut.Add(-time.Hour), cut.Add(time.Minute)
	// v1-v3 old, v4 young, v5 old again, v6-v8 young, v9-v10 old; the snapshot at v8.
	at := []time.Time{old, old, old, young, old, young, young, young, old, old}
	b := newBatch(id, claim.Epoch, 0, len(at))
	b.Outbox = nil
	for i := range b.Commands {
		b.Commands[i].CreatedAt = at[i]
	}
	b.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: 8, Payload: []byte("snap"), CreatedAt: now()}
	mustCommitOK(t, repo, b)
	if n, err := repo.PruneCommands(ctx, 0, cut, 2); err != nil || n != 2 {
		t.Fatalf("PruneCommands(limit 2) = %d, %v; want v1-v2 deleted", n, err)
	}
	if n, err := repo.PruneCommands(ctx, 0, cut, 100); err != nil || n != 1 {
		t.Fatalf("PruneCommands = %d, %v; want v3 deleted", n, err)
	}
	if left := mustListCommands(t, repo, id, 0); len(left) != 7 || left[0].RoomVersion != 4 {
		t.Fatalf("the log after pruning: %d rows from %+v; want v4-v10", len(left), left[:min(1, len(left))])
	}
}

// testPruneOutboxStopsAtTheFirstYoungRow: published rows are pruned in id
// order up to the first row written after the cut, even when an older
// published row follows it (two nodes' clocks). The cut is ahead of now so
// that the rows published now count as published before it.
func testPruneOutboxStopsAtTheFirstYoungRow(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	cut := now().Add(time.Hour)
	old, young := now(), cut.Add(time.Hour)
	var rows []outbox.Record
	for i, at := range []time.Time{old, old, young, old} {
		r := event(id, int64(i+1), 0)
		r.CreatedAt = at
		rows = append(rows, r)
	}
	mustSaveOutbox(t, repo, rows...)
	if err := repo.MarkOutboxPublishedBatch(ctx, eventIDs(rows)); err != nil {
		t.Fatalf("MarkOutboxPublishedBatch: %v", err)
	}
	for call := 0; ; call++ { // a shared database's older published rows go too
		if call > 20 {
			t.Fatal("PruneOutbox did not run dry")
		}
		n, err := repo.PruneOutbox(ctx, cut, 1000)
		if err != nil {
			t.Fatalf("PruneOutbox: %v", err)
		}
		if n == 0 {
			break
		}
	}
	for i, r := range rows {
		err := repo.MarkOutboxPublished(ctx, r.EventID)
		if gone := errors.Is(err, store.ErrNotFound); gone != (i < 2) || err != nil && !gone {
			t.Fatalf("row %s after pruning: MarkOutboxPublished = %v; want the first two deleted, the rest from the young one kept", r.EventID, err)
		}
	}
}

func testPruneOutbox(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	var rows []outbox.Record
	for v := int64(1); v <= 7; v++ {
		rows = append(rows, event(id, v, 0))
	}
	if err := repo.SaveOutbox(ctx, rows); err != nil {
		t.Fatalf("SaveOutbox: %v", err)
	}
	// A dead row, of a room and type of its own, is never pruned.
	doomed := event(newRoomID(t), 1, 0)
	doomed.EventType = newEventType(t)
	mustSaveOutbox(t, repo, doomed)
	if !mustFail(t, repo, doomed.EventID, "gone", time.Time{}, 1) {
		t.Fatal("FailOutbox(maxAttempts 1) left the row alive")
	}
	publish := func(r outbox.Record) {
		t.Helper()
		if err := repo.MarkOutboxPublished(ctx, r.EventID); err != nil {
			t.Fatalf("MarkOutboxPublished(%s): %v", r.EventID, err)
		}
	}
	// rows[0:5] published before the cut, rows[5] pending, rows[6] published
	// after the cut. Times are stored in milliseconds: step over one.
	for _, r := range rows[:5] {
		publish(r)
	}
	cut := nextMillisecond(time.Now())
	nextMillisecond(cut)
	publish(rows[6])
	// Marking published rows again keeps their first publish time, before the cut.
	if err := repo.MarkOutboxPublishedBatch(ctx, eventIDs(rows[:5])); err != nil {
		t.Fatalf("MarkOutboxPublishedBatch(published rows): %v", err)
	}

	if n, err := repo.PruneOutbox(ctx, cut, 0); err != nil || n != 0 {
		t.Fatalf("PruneOutbox(limit 0) = %d, %v; want 0", n, err)
	}
	const limit = 2
	total := 0
	for call := 0; ; call++ {
		if call > 5 {
			t.Fatal("PruneOutbox did not run dry")
		}
		n, err := repo.PruneOutbox(ctx, cut, limit)
		if err != nil {
			t.Fatalf("PruneOutbox: %v", err)
		}
		if n > limit {
			t.Fatalf("PruneOutbox(limit %d) deleted %d rows", limit, n)
		}
		total += n
		if n < limit {
			break
		}
	}
	if total != 5 {
		t.Fatalf("PruneOutbox deleted %d rows in all, want 5", total)
	}
	// A deleted row is unknown; a kept published row is still there, and
	// marking it again is the usual no-op.
	for _, r := range rows[:5] {
		if err := repo.MarkOutboxPublished(ctx, r.EventID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("MarkOutboxPublished(pruned %s): err %v, want ErrNotFound", r.EventID, err)
		}
	}
	publish(rows[6])
	if ids := eventIDs(mustPending(t, repo, id)); !slices.Equal(ids, []string{rows[5].EventID}) {
		t.Fatalf("pending after pruning = %v, want only %s", ids, rows[5].EventID)
	}
	if n, err := repo.PruneOutbox(ctx, cut, limit); err != nil || n != 0 {
		t.Fatalf("PruneOutbox again = %d, %v; want 0", n, err)
	}
	if n, err := repo.RequeueDeadOutbox(ctx, doomed.EventType); err != nil || n != 1 {
		t.Fatalf("RequeueDeadOutbox(the dead row's type) after pruning = %d, %v; want 1", n, err)
	}
}

// nextMillisecond waits until the clock is in a later millisecond than t,
// and returns the time it read then. It spins: the wait is under 1ms.
func nextMillisecond(t time.Time) time.Time {
	for {
		if n := time.Now(); n.UnixMilli() > t.UnixMilli() {
			return n
		}
	}
}

func testListCommandsAfter(t *testing.T, repo store.Repository) {
	a, claimA := newClaimedRoom(t, repo)
	b, claimB := newClaimedRoom(t, repo)
	batchA := newBatch(a, claimA.Epoch, 0, 5)
	batchB := newBatch(b, claimB.Epoch, 0, 2)
	mustCommitOK(t, repo, batchB, batchA)

	assertCommands(t, mustListCommands(t, repo, a, 0), batchA.Commands)
	assertCommands(t, mustListCommands(t, repo, a, 2), batchA.Commands[2:])
	assertCommands(t, mustListCommands(t, repo, b, 1), batchB.Commands[1:])
	if cmds := mustListCommands(t, repo, a, 5); len(cmds) != 0 {
		t.Fatalf("ListCommandsAfter(head) = %+v, want none", cmds)
	}
	if cmds := mustListCommands(t, repo, newRoomID(t), 0); len(cmds) != 0 {
		t.Fatalf("ListCommandsAfter(unknown room) = %+v, want none", cmds)
	}
}

func testListCommandsPage(t *testing.T, repo store.Repository) {
	a, claim := newClaimedRoom(t, repo)
	batch := newBatch(a, claim.Epoch, 0, 5)
	mustCommitOK(t, repo, batch)
	for _, tc := range []struct {
		after int64
		limit int
		want  []store.CommandRecord
	}{
		{0, 2, batch.Commands[:2]}, {2, 2, batch.Commands[2:4]}, {4, 2, batch.Commands[4:]}, {0, 10, batch.Commands}, {5, 2, nil},
	} {
		cmds, head, err := repo.ListCommandsPage(t.Context(), a, tc.after, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		assertCommands(t, cmds, tc.want)
		if head != 5 {
			t.Fatalf("ListCommandsPage(after %d, limit %d): head %d, want 5", tc.after, tc.limit, head)
		}
	}
	if cmds, head, err := repo.ListCommandsPage(t.Context(), newRoomID(t), 0, 10); err != nil || len(cmds) != 0 || head != 0 {
		t.Fatalf("ListCommandsPage(unknown room) = %+v, %d, %v", cmds, head, err)
	}
}

func testGetCommands(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	a, claimA := newClaimedRoom(t, repo)
	b, claimB := newClaimedRoom(t, repo)
	batchA := newBatch(a, claimA.Epoch, 0, 3)
	batchA.Commands[1].Replayable = false
	mustCommitOK(t, repo, batchA, newBatch(b, claimB.Epoch, 0, 1))

	got, found, err := repo.GetCommand(ctx, a, batchA.Commands[1].CommandID)
	if err != nil || !found {
		t.Fatalf("GetCommand = found %v, err %v; want found", found, err)
	}
	assertCommands(t, []store.CommandRecord{got}, batchA.Commands[1:2])
	if _, found, err := repo.GetCommand(ctx, a, "missing"); err != nil || found {
		t.Fatalf("GetCommand(missing) = found %v, err %v; want not found", found, err)
	}
	if _, found, err := repo.GetCommand(ctx, b, batchA.Commands[1].CommandID); err != nil || found {
		t.Fatalf("GetCommand(b, a's c-2) = found %v, err %v; want not found: command ids are per room", found, err)
	}

	ids := []string{batchA.Commands[0].CommandID, "missing", batchA.Commands[2].CommandID}
	// Enough ids that an implementation chunking its IN list must chunk.
	for i := range 1500 {
		ids = append(ids, fmt.Sprintf("absent-%d", i))
	}
	m, err := repo.GetCommands(ctx, a, ids)
	if err != nil {
		t.Fatalf("GetCommands: %v", err)
	}
	if len(m) != 2 {
		t.Fatalf("GetCommands returned %d commands, want 2: %+v", len(m), m)
	}
	for _, want := range []store.CommandRecord{batchA.Commands[0], batchA.Commands[2]} {
		assertCommands(t, []store.CommandRecord{m[want.CommandID]}, []store.CommandRecord{want})
	}
	// Command ids are per room: b has c-1 but not a's c-2.
	m, err = repo.GetCommands(ctx, b, []string{batchA.Commands[0].CommandID, batchA.Commands[1].CommandID})
	if err != nil || len(m) != 1 || m[batchA.Commands[0].CommandID].RoomID != b {
		t.Fatalf("GetCommands(b) = %+v, %v; want only b's own c-1", m, err)
	}
	if m, err := repo.GetCommands(ctx, a, nil); err != nil || len(m) != 0 {
		t.Fatalf("GetCommands(none) = %+v, %v; want empty", m, err)
	}
}

func testSaveCommand(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	unknown := newRoomID(t)
	if err := repo.SaveCommand(ctx, command(unknown, 1)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SaveCommand(unknown room): err %v, want ErrNotFound", err)
	}

	id, _ := newClaimedRoom(t, repo)
	first := command(id, 1)
	first.Replayable = false
	mustSaveCommand(t, repo, first)

	dup := command(id, 2)
	dup.CommandID = first.CommandID
	again := command(id, 1)
	again.CommandID = "other"
	gap := command(id, 3)
	for name, rec := range map[string]store.CommandRecord{"duplicate id": dup, "same version": again, "gap": gap} {
		if err := repo.SaveCommand(ctx, rec); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("SaveCommand(%s): err %v, want ErrConflict", name, err)
		}
	}

	second := command(id, 2)
	mustSaveCommand(t, repo, second)
	assertCommands(t, mustListCommands(t, repo, id, 0), []store.CommandRecord{first, second})
	if info := mustRoomInfo(t, repo, id); info.HeadVersion != 2 {
		t.Fatalf("head after SaveCommand = %d, want 2", info.HeadVersion)
	}
}

func testOutbox(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	rows := []outbox.Record{event(id, 1, 0), event(id, 1, 1), event(id, 2, 0)}
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	rows[1].TraceContext = traceparent // a traced command's row; the others have none
	later := event(id, 3, 0)
	later.NextAttemptAt = time.Now().Add(time.Hour)
	if err := repo.SaveOutbox(ctx, append(rows, later)); err != nil {
		t.Fatalf("SaveOutbox: %v", err)
	}

	pending := mustPending(t, repo, id)
	if ids := eventIDs(pending); !slices.Equal(ids, eventIDs(rows)) {
		t.Fatalf("pending = %v, want %v (the later row is not due)", ids, eventIDs(rows))
	}
	for i, r := range pending {
		if r.TraceContext != rows[i].TraceContext {
			t.Fatalf("row %s: trace context %q, want %q", r.EventID, r.TraceContext, rows[i].TraceContext)
		}
	}

	target := rows[0].EventID
	for attempt := int32(1); attempt <= 2; attempt++ {
		msg := fmt.Sprintf("broker down %d", attempt)
		if err := repo.MarkOutboxFailed(ctx, target, msg); err != nil {
			t.Fatalf("MarkOutboxFailed: %v", err)
		}
		r, ok := findEvent(mustPending(t, repo, id), target)
		if !ok || r.Attempts != attempt || r.LastError != msg || r.Status != outbox.StatusPending {
			t.Fatalf("after failure %d: row %+v (listed %v), want pending, attempts %d, last error %q", attempt, r, ok, attempt, msg)
		}
	}

	if err := repo.MarkOutboxPublished(ctx, target); err != nil {
		t.Fatalf("MarkOutboxPublished: %v", err)
	}
	if _, ok := findEvent(mustPending(t, repo, id), target); ok {
		t.Fatal("published row is still listed as pending")
	}
	if err := repo.MarkOutboxPublished(ctx, target); err != nil {
		t.Fatalf("MarkOutboxPublished again: %v, want a no-op", err)
	}
	if ids := eventIDs(mustPending(t, repo, id)); !slices.Equal(ids, eventIDs(rows[1:])) {
		t.Fatalf("pending after publish = %v, want %v", ids, eventIDs(rows[1:]))
	}

	if err := repo.MarkOutboxPublished(ctx, id+"/missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("MarkOutboxPublished(unknown): err %v, want ErrNotFound", err)
	}
	if err := repo.MarkOutboxFailed(ctx, id+"/missing", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("MarkOutboxFailed(unknown): err %v, want ErrNotFound", err)
	}
}

func testOutboxDuplicateEventID(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	if err := repo.SaveOutbox(ctx, []outbox.Record{event(id, 1, 0)}); err != nil {
		t.Fatalf("SaveOutbox: %v", err)
	}
	err := repo.SaveOutbox(ctx, []outbox.Record{event(id, 2, 0), event(id, 1, 0)})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("SaveOutbox(duplicate event id): err %v, want ErrConflict", err)
	}
	if ids := eventIDs(mustPending(t, repo, id)); !slices.Equal(ids, []string{event(id, 1, 0).EventID}) {
		t.Fatalf("pending after refused SaveOutbox = %v, want only the first row", ids)
	}
}

// testListOutboxHeads: each room with pending rows shows its first pending
// row once, due or not, past its published and dead rows; rooms with none
// pending show nothing; heads page by id.
func testListOutboxHeads(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	a, b, c, d := newRoomID(t), newRoomID(t), newRoomID(t), newRoomID(t)
	first := event(a, 1, 0)
	first.NextAttemptAt = now().Add(time.Hour) // not due: still the head
	mustSaveOutbox(t, repo, first, event(b, 1, 0), event(b, 2, 0), event(c, 1, 0), event(d, 1, 0))
	mustSaveOutbox(t, repo, event(a, 2, 0), event(b, 3, 0), event(a, 3, 0))
	if err := repo.MarkOutboxPublishedBatch(ctx, []string{event(b, 1, 0).EventID, event(c, 1, 0).EventID}); err != nil {
		t.Fatalf("MarkOutboxPublishedBatch: %v", err)
	}
	mustFail(t, repo, event(b, 2, 0).EventID, "poison", time.Time{}, 1)
	mustFail(t, repo, event(d, 1, 0).EventID, "poison", time.Time{}, 1)
	mine := func(rows []outbox.Record) []outbox.Record {
		var out []outbox.Record
		for _, r := range rows {
			if r.RoomID == a || r.RoomID == b || r.RoomID == c || r.RoomID == d {
				out = append(out, r)
			}
		}
		return out
	}
	heads := func(after int64, limit int) []outbox.Record {
		t.Helper()
		rows, err := repo.ListOutboxHeads(ctx, after, limit)
		if err != nil {
			t.Fatalf("ListOutboxHeads(%d, %d): %v", after, limit, err)
		}
		if len(rows) > limit {
			t.Fatalf("ListOutboxHeads(%d, %d) returned %d rows", after, limit, len(rows))
		}
		for i, r := range rows {
			if r.ID <= after || i > 0 && r.ID <= rows[i-1].ID {
				t.Fatalf("ListOutboxHeads(%d, %d): id %d, want ascending ids above %d", after, limit, r.ID, after)
			}
		}
		return rows
	}

	got := mine(heads(0, pendingLimit))
	if ids, want := eventIDs(got), []string{first.EventID, event(b, 3, 0).EventID}; !slices.Equal(ids, want) {
		t.Fatalf("heads of mine = %v, want %v", ids, want)
	}
	if h := got[0]; h.Status != outbox.StatusPending || !h.NextAttemptAt.Equal(first.NextAttemptAt) ||
		!bytes.Equal(h.Payload, first.Payload) || h.OwnerEpoch != first.OwnerEpoch || h.CreatedAt.IsZero() {
		t.Fatalf("a's head = %+v, want the row as saved", h)
	}
	// Paging: past a's head, b's is next among mine, whatever others wrote.
	var paged []outbox.Record
	for after := got[0].ID; ; {
		rows := heads(after, 2)
		if len(rows) == 0 {
			break
		}
		paged = append(paged, mine(rows)...)
		after = rows[len(rows)-1].ID
	}
	if ids := eventIDs(paged); !slices.Equal(ids, []string{event(b, 3, 0).EventID}) {
		t.Fatalf("heads after a's = %v, want b's only", ids)
	}
	if rows, err := repo.ListOutboxHeads(ctx, 0, 0); err != nil || len(rows) != 0 {
		t.Fatalf("ListOutboxHeads(limit 0) = %d rows, %v; want none", len(rows), err)
	}
}

func testListRoomOutbox(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	a, b := newRoomID(t), newRoomID(t)
	// Saved out of order and interleaved with room b's rows, so that id
	// order is not the room's order.
	later := event(a, 2, 0)
	later.NextAttemptAt = now().Add(time.Hour)
	published, dead := event(a, 4, 0), event(a, 5, 0)
	dead.EventType = newEventType(t)
	mustSaveOutbox(t, repo, event(a, 3, 0), event(b, 1, 0), event(a, 1, 1))
	mustSaveOutbox(t, repo, event(b, 2, 0), later, event(a, 1, 0), event(a, 3, 1))
	mustSaveOutbox(t, repo, published, dead, event(b, 3, 0), event(a, 6, 0))
	if err := repo.MarkOutboxPublished(ctx, published.EventID); err != nil {
		t.Fatalf("MarkOutboxPublished: %v", err)
	}
	mustFail(t, repo, dead.EventID, "poison", time.Time{}, 1)

	wantA := []string{event(a, 1, 0).EventID, event(a, 1, 1).EventID, later.EventID,
		event(a, 3, 0).EventID, event(a, 3, 1).EventID, event(a, 6, 0).EventID}
	got := mustRoomOutbox(t, repo, a, 100)
	if ids := eventIDs(got); !slices.Equal(ids, wantA) {
		t.Fatalf("ListRoomOutbox(a) = %v, want %v", ids, wantA)
	}
	for _, r := range got {
		if r.RoomID != a || r.Status != outbox.StatusPending || r.ID <= 0 {
			t.Fatalf("ListRoomOutbox(a) listed %+v", r)
		}
	}
	if !got[2].NextAttemptAt.Equal(later.NextAttemptAt) {
		t.Fatalf("not-due row NextAttemptAt = %v, want %v", got[2].NextAttemptAt, later.NextAttemptAt)
	}
	if ids := eventIDs(mustRoomOutbox(t, repo, a, 2)); !slices.Equal(ids, wantA[:2]) {
		t.Fatalf("ListRoomOutbox(a, limit 2) = %v, want %v", ids, wantA[:2])
	}
	wantB := []string{event(b, 1, 0).EventID, event(b, 2, 0).EventID, event(b, 3, 0).EventID}
	if ids := eventIDs(mustRoomOutbox(t, repo, b, 100)); !slices.Equal(ids, wantB) {
		t.Fatalf("ListRoomOutbox(b) = %v, want %v", ids, wantB)
	}

	// Once the head is published the next read starts after it.
	if err := repo.MarkOutboxPublishedBatch(ctx, wantA[:2]); err != nil {
		t.Fatalf("MarkOutboxPublishedBatch: %v", err)
	}
	if ids := eventIDs(mustRoomOutbox(t, repo, a, 2)); !slices.Equal(ids, wantA[2:4]) {
		t.Fatalf("ListRoomOutbox(a, limit 2) after publishing the head = %v, want %v", ids, wantA[2:4])
	}
	if rows := mustRoomOutbox(t, repo, newRoomID(t), 100); len(rows) != 0 {
		t.Fatalf("ListRoomOutbox(unknown room) = %v, want none", eventIDs(rows))
	}
	if rows, err := repo.ListRoomOutbox(ctx, a, 0); err != nil || len(rows) != 0 {
		t.Fatalf("ListRoomOutbox(limit 0) = %d rows, %v; want none", len(rows), err)
	}
}

func testFailOutbox(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	typ := newEventType(t)
	r, past, free, published := event(id, 1, 0), event(id, 2, 0), event(id, 3, 0), event(id, 4, 0)
	r.EventType, past.EventType = typ, typ
	mustSaveOutbox(t, repo, r, past, free, published)
	row := func(eventID string) (outbox.Record, bool) {
		t.Helper()
		return findEvent(mustRoomOutbox(t, repo, id, 100), eventID)
	}

	for attempt := int32(1); attempt <= 2; attempt++ {
		msg := fmt.Sprintf("broker down %d", attempt)
		next := now().Add(time.Duration(attempt) * time.Hour)
		if mustFail(t, repo, r.EventID, msg, next, 3) {
			t.Fatalf("failure %d of 3 made the row dead", attempt)
		}
		got, ok := row(r.EventID)
		if !ok || got.Status != outbox.StatusPending || got.Attempts != attempt || got.LastError != msg ||
			!got.NextAttemptAt.Equal(next) {
			t.Fatalf("after failure %d: row %+v (listed %v), want pending, attempts %d, last error %q, next %v",
				attempt, got, ok, attempt, msg, next)
		}
		if _, due := findEvent(mustPending(t, repo, id), r.EventID); due {
			t.Fatalf("after failure %d the row is due before its next attempt", attempt)
		}
	}
	if !mustFail(t, repo, r.EventID, "final", now().Add(time.Hour), 3) {
		t.Fatal("failure 3 of 3 left the row alive")
	}
	if _, ok := row(r.EventID); ok {
		t.Fatal("a dead row is listed by ListRoomOutbox")
	}
	if heads, err := repo.ListOutboxHeads(ctx, 0, pendingLimit); err != nil {
		t.Fatalf("ListOutboxHeads: %v", err)
	} else if _, ok := findEvent(heads, r.EventID); ok {
		t.Fatal("a dead row is listed by ListOutboxHeads")
	}

	// A row that is not pending is left alone.
	if err := repo.MarkOutboxPublished(ctx, published.EventID); err != nil {
		t.Fatalf("MarkOutboxPublished: %v", err)
	}
	for _, eventID := range []string{r.EventID, published.EventID} {
		if dead, err := repo.FailOutbox(ctx, eventID, "late", time.Time{}, 1); err != nil || dead {
			t.Fatalf("FailOutbox(%s, not pending) = %v, %v; want false, nil", eventID, dead, err)
		}
	}
	if _, err := repo.FailOutbox(ctx, id+"/missing", "x", time.Time{}, 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("FailOutbox(unknown): err %v, want ErrNotFound", err)
	}

	// The limit counts every failed attempt, MarkOutboxFailed's too: a row
	// past it dies at its next failure.
	for range 3 {
		if err := repo.MarkOutboxFailed(ctx, past.EventID, "old failure"); err != nil {
			t.Fatalf("MarkOutboxFailed: %v", err)
		}
	}
	if !mustFail(t, repo, past.EventID, "over the limit", time.Time{}, 2) {
		t.Fatal("a row past maxAttempts stayed alive")
	}

	// Without a limit a row never dies; a zero next is due at once.
	for attempt := int32(1); attempt <= 4; attempt++ {
		if mustFail(t, repo, free.EventID, "again", time.Time{}, 0) {
			t.Fatalf("failure %d with no limit made the row dead", attempt)
		}
	}
	if got, ok := findEvent(mustPending(t, repo, id), free.EventID); !ok || got.Attempts != 4 {
		t.Fatalf("row failed 4 times with a zero next: %+v (due %v), want due with 4 attempts", got, ok)
	}

	// Requeued rows are pending again: no attempts, due now, last error kept.
	if n, err := repo.RequeueDeadOutbox(ctx, typ); err != nil || n != 2 {
		t.Fatalf("RequeueDeadOutbox(%s) = %d, %v; want 2", typ, n, err)
	}
	due := mustPending(t, repo, id)
	for _, want := range []struct{ eventID, lastErr string }{{r.EventID, "final"}, {past.EventID, "over the limit"}} {
		got, ok := findEvent(due, want.eventID)
		if !ok || got.Status != outbox.StatusPending || got.Attempts != 0 || got.LastError != want.lastErr {
			t.Fatalf("requeued row %+v (due %v), want pending, due, 0 attempts, last error %q", got, ok, want.lastErr)
		}
	}
	if n, err := repo.RequeueDeadOutbox(ctx, typ); err != nil || n != 0 {
		t.Fatalf("RequeueDeadOutbox(%s) again = %d, %v; want 0", typ, n, err)
	}
	// The requeued row counts its attempts from zero.
	if mustFail(t, repo, r.EventID, "after requeue", time.Time{}, 2) {
		t.Fatal("the first failure after a requeue made the row dead")
	}
}

func testFailOutboxConcurrent(t *testing.T, repo store.Repository) {
	// Relays failing one row at once each count, and exactly one of them
	// sees the row die.
	ctx := t.Context()
	id := newRoomID(t)
	typ := newEventType(t)
	counted, dying := event(id, 1, 0), event(id, 2, 0)
	dying.EventType = typ
	mustSaveOutbox(t, repo, counted, dying)
	const writers = 8
	deaths := make([]bool, writers)
	errs := make([]error, 2*writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			_, errs[w] = repo.FailOutbox(ctx, counted.EventID, fmt.Sprintf("writer %d", w), time.Time{}, 100)
		})
		wg.Go(func() {
			deaths[w], errs[writers+w] = repo.FailOutbox(ctx, dying.EventID, fmt.Sprintf("writer %d", w), time.Time{}, 5)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("FailOutbox call %d: %v", i, err)
		}
	}
	died := 0
	for _, dead := range deaths {
		if dead {
			died++
		}
	}
	if died != 1 {
		t.Fatalf("%d concurrent failures reported the row dead, want exactly 1", died)
	}
	rows := mustRoomOutbox(t, repo, id, 100)
	if len(rows) != 1 || rows[0].EventID != counted.EventID || rows[0].Attempts != writers {
		t.Fatalf("pending rows after concurrent failures = %+v, want only %s with %d attempts", rows, counted.EventID, writers)
	}
	if n, err := repo.RequeueDeadOutbox(ctx, typ); err != nil || n != 1 {
		t.Fatalf("RequeueDeadOutbox(%s) = %d, %v; want the 1 dead row", typ, n, err)
	}
}

func testMarkOutboxPublishedBatch(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	id := newRoomID(t)
	batchType, singleType := newEventType(t), newEventType(t)
	var rows []outbox.Record
	for v := int64(1); v <= 6; v++ {
		rows = append(rows, event(id, v, 0))
	}
	rows[4].EventType, rows[5].EventType = batchType, singleType
	mustSaveOutbox(t, repo, rows...)
	if err := repo.MarkOutboxPublished(ctx, rows[0].EventID); err != nil {
		t.Fatalf("MarkOutboxPublished: %v", err)
	}
	mustFail(t, repo, rows[4].EventID, "poison", time.Time{}, 1)
	mustFail(t, repo, rows[5].EventID, "poison", time.Time{}, 1)

	// Published, unknown and dead ids among pending ones, spread over more
	// ids than one chunk of an implementation that chunks its IN list.
	ids := []string{rows[0].EventID, id + "/missing", rows[1].EventID}
	for i := range 1500 {
		ids = append(ids, fmt.Sprintf("%s/absent/%d", id, i))
	}
	ids = append(ids, rows[3].EventID, rows[4].EventID)
	if err := repo.MarkOutboxPublishedBatch(ctx, ids); err != nil {
		t.Fatalf("MarkOutboxPublishedBatch: %v", err)
	}
	if got := eventIDs(mustRoomOutbox(t, repo, id, 100)); !slices.Equal(got, []string{rows[2].EventID}) {
		t.Fatalf("pending after MarkOutboxPublishedBatch = %v, want only %s", got, rows[2].EventID)
	}
	// The dead row in the batch is published: none of its type is left to requeue.
	if n, err := repo.RequeueDeadOutbox(ctx, batchType); err != nil || n != 0 {
		t.Fatalf("RequeueDeadOutbox after publishing the dead row in a batch = %d, %v; want 0", n, err)
	}
	for _, r := range []outbox.Record{rows[0], rows[1], rows[3], rows[4]} {
		if err := repo.MarkOutboxPublished(ctx, r.EventID); err != nil {
			t.Fatalf("MarkOutboxPublished(%s) after the batch: %v, want the usual no-op", r.EventID, err)
		}
	}
	// MarkOutboxPublished publishes a dead row too.
	if err := repo.MarkOutboxPublished(ctx, rows[5].EventID); err != nil {
		t.Fatalf("MarkOutboxPublished(dead): %v", err)
	}
	if n, err := repo.RequeueDeadOutbox(ctx, singleType); err != nil || n != 0 {
		t.Fatalf("RequeueDeadOutbox after publishing the dead row = %d, %v; want 0", n, err)
	}

	if err := repo.MarkOutboxPublishedBatch(ctx, nil); err != nil {
		t.Fatalf("MarkOutboxPublishedBatch(none): %v", err)
	}
	if err := repo.MarkOutboxPublishedBatch(ctx, []string{rows[2].EventID, rows[2].EventID}); err != nil {
		t.Fatalf("MarkOutboxPublishedBatch(duplicate ids): %v", err)
	}
	if got := mustRoomOutbox(t, repo, id, 100); len(got) != 0 {
		t.Fatalf("pending after publishing all = %v, want none", eventIDs(got))
	}
}

// testOutboxStats runs alone: it compares the global counts before and
// after its own changes, and requeues every dead row.
func testOutboxStats(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	before := mustStats(t, repo)
	id := newRoomID(t)
	typeA, typeB := newEventType(t), newEventType(t)

	// The oldest row is not the lowest id: OldestPending is by creation time.
	oldest := now().Add(-24 * time.Hour)
	if !before.OldestPending.IsZero() && !before.OldestPending.After(oldest) {
		oldest = before.OldestPending.Add(-time.Hour)
	}
	var rows []outbox.Record
	for v := int64(1); v <= 6; v++ {
		rows = append(rows, event(id, v, 0))
	}
	rows[1].CreatedAt = oldest
	rows[2].EventType, rows[3].EventType, rows[4].EventType = typeA, typeA, typeB
	mustSaveOutbox(t, repo, rows...)
	for _, r := range rows[2:5] {
		mustFail(t, repo, r.EventID, "poison", time.Time{}, 1)
	}
	if err := repo.MarkOutboxPublished(ctx, rows[5].EventID); err != nil {
		t.Fatalf("MarkOutboxPublished: %v", err)
	}

	wantDead := maps.Clone(before.Dead)
	wantDead[typeA], wantDead[typeB] = 2, 1
	assertStats(t, mustStats(t, repo), before.Pending+2, oldest, wantDead, before.Published+1)

	if err := repo.MarkOutboxPublished(ctx, rows[1].EventID); err != nil {
		t.Fatalf("MarkOutboxPublished: %v", err)
	}
	nextOldest := rows[0].CreatedAt
	if !before.OldestPending.IsZero() && before.OldestPending.Before(nextOldest) {
		nextOldest = before.OldestPending
	}
	assertStats(t, mustStats(t, repo), before.Pending+1, nextOldest, wantDead, before.Published+2)

	if n, err := repo.RequeueDeadOutbox(ctx, typeA); err != nil || n != 2 {
		t.Fatalf("RequeueDeadOutbox(%s) = %d, %v; want 2", typeA, n, err)
	}
	delete(wantDead, typeA)
	assertStats(t, mustStats(t, repo), before.Pending+3, nextOldest, wantDead, before.Published+2)

	var othersDead int64
	for _, n := range before.Dead {
		othersDead += n
	}
	if n, err := repo.RequeueDeadOutbox(ctx, ""); err != nil || int64(n) != othersDead+1 {
		t.Fatalf("RequeueDeadOutbox(all) = %d, %v; want %d", n, err, othersDead+1)
	}
	after := mustStats(t, repo)
	if othersDead > 0 && after.OldestPending.Before(nextOldest) {
		nextOldest = after.OldestPending // a requeued row of others is older
	}
	assertStats(t, after, before.Pending+4+othersDead, nextOldest, map[string]int64{}, before.Published+2)

	// A count that stops: at the number kept it is exact; below it, it
	// says that many and more, with the rest of the summary whole.
	kept := after.Published
	for _, upTo := range []int64{kept, kept - 1, 1} {
		st, err := repo.OutboxStats(ctx, upTo)
		if err != nil {
			t.Fatalf("OutboxStats(%d): %v", upTo, err)
		}
		if more := upTo < kept; st.Published != upTo || st.PublishedMore != more {
			t.Fatalf("OutboxStats(%d) = %+v with %d published rows kept; want published %d, more %v", upTo, st, kept, upTo, more)
		}
		assertStats(t, st, after.Pending, after.OldestPending, after.Dead, upTo)
	}
}

func testListRooms(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	prefix := newRoomID(t)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		meta := testMeta(id)
		meta.SeatCount = int32(i + 1)
		mustSaveMeta(t, repo, meta)
		want = append(want, id)
	}
	mustClaim(t, repo, want[2], "node-x")

	var got []store.RoomInfo
	after := prefix
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatal("ListRooms did not stop paging")
		}
		rooms, err := repo.ListRooms(ctx, after, 2)
		if err != nil {
			t.Fatalf("ListRooms(after %q): %v", after, err)
		}
		if len(rooms) > 2 {
			t.Fatalf("ListRooms(limit 2) returned %d rooms", len(rooms))
		}
		mine := 0
		for _, r := range rooms {
			if strings.HasPrefix(r.Meta.RoomID, prefix+"-") {
				got = append(got, r)
				mine++
			}
		}
		if mine < len(rooms) || len(rooms) < 2 {
			break
		}
		after = rooms[len(rooms)-1].Meta.RoomID
	}
	if len(got) != len(want) {
		t.Fatalf("paged %d rooms, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Meta.RoomID != want[i] || r.Meta.SeatCount != int32(i+1) || r.HeadVersion != 0 || r.UpdatedAt.IsZero() {
			t.Fatalf("room %d = %+v, want id %s, seats %d, head 0, an update time", i, r, want[i], i+1)
		}
	}
	if got[2].OwnerEpoch <= 0 || got[2].OwnerNode != "node-x" || got[1].OwnerEpoch != 0 || got[1].OwnerNode != "" {
		t.Fatalf("owner fields: claimed %+v, unclaimed %+v", got[2], got[1])
	}
	if rooms, err := repo.ListRooms(ctx, prefix, 0); err != nil || len(rooms) != 0 {
		t.Fatalf("ListRooms(limit 0) = %d rooms, %v; want none", len(rooms), err)
	}
}

// Timers committed with a batch are listed once due, oldest first, and not
// before; setting a timer id again replaces the timer.
func testTimersDue(t *testing.T, repo store.Repository) {
	id, claim := newClaimedRoom(t, repo)
	at := now()
	b := newBatch(id, claim.Epoch, 0, 1)
	late := timer(id, "late", at.Add(2*time.Hour))
	early := timer(id, "early", at.Add(time.Hour))
	early.Payload = []byte{0, 1, 0xff, '"'}
	b.Timers = []store.Timer{late, early}
	mustCommitOK(t, repo, b)

	if got := mustDueTimers(t, repo, id, at.Add(time.Hour-time.Millisecond)); len(got) != 0 {
		t.Fatalf("timers due before their time: %+v", got)
	}
	assertTimers(t, mustDueTimers(t, repo, id, at.Add(time.Hour)), early)
	assertTimers(t, mustDueTimers(t, repo, id, at.Add(3*time.Hour)), early, late)
	if got, err := repo.ListDueTimers(t.Context(), "", at.Add(3*time.Hour), 0); err != nil || len(got) != 0 {
		t.Fatalf("ListDueTimers(limit 0) = %d timers, %v; want none", len(got), err)
	}
	if got, err := repo.ListDueTimers(t.Context(), "", at.Add(3*time.Hour), 1); err != nil || len(got) != 1 {
		t.Fatalf("ListDueTimers(limit 1) = %d timers, %v; want one", len(got), err)
	}
	// By kind: the rows of one kind, whatever the others.
	other := timer(id, "other", at.Add(time.Hour))
	other.Kind = "other_kind"
	mustCommitOK(t, repo, store.Batch{RoomID: id, OwnerEpoch: claim.Epoch, BaseVersion: 1, Timers: []store.Timer{other}})
	for kind, want := range map[string][]store.Timer{"test_kind": {early, late}, "other_kind": {other}, "no_such_kind": nil} {
		got, err := repo.ListDueTimers(t.Context(), kind, at.Add(3*time.Hour), pendingLimit)
		if err != nil {
			t.Fatalf("ListDueTimers(%s): %v", kind, err)
		}
		var mine []store.Timer
		for _, tm := range got {
			if tm.Kind != kind {
				t.Fatalf("ListDueTimers(%s) listed a timer of kind %s", kind, tm.Kind)
			}
			if tm.RoomID == id {
				mine = append(mine, tm)
			}
		}
		assertTimers(t, mine, want...)
	}
	if err := repo.DeleteTimers(t.Context(), id, []string{"other"}, time.Time{}); err != nil {
		t.Fatal(err)
	}

	// Set again, a timer moves; a zero CreatedAt is the commit's time.
	moved := timer(id, "early", at.Add(4*time.Hour))
	moved.Kind, moved.Payload, moved.CreatedAt = "other_kind", []byte("moved"), time.Time{}
	b2 := newBatch(id, claim.Epoch, 1, 1)
	b2.Timers = []store.Timer{moved}
	mustCommitOK(t, repo, b2)
	assertTimers(t, mustDueTimers(t, repo, id, at.Add(3*time.Hour)), late)
	got := mustDueTimers(t, repo, id, at.Add(4*time.Hour))
	if len(got) != 2 || got[1].CreatedAt.IsZero() {
		t.Fatalf("after moving a timer: %+v, want two with a creation time", got)
	}
	moved.CreatedAt = got[1].CreatedAt
	assertTimers(t, got, late, moved)
}

// A batch that is fenced or refused sets and deletes no timer, whichever
// path the commit takes.
func testTimersFencedOrRefused(t *testing.T, repo store.Repository) {
	at := now()
	a, claimA := newClaimedRoom(t, repo)
	b, claimB := newClaimedRoom(t, repo)
	keep := timer(a, "keep", at.Add(-time.Minute))
	first := newBatch(a, claimA.Epoch, 0, 1)
	first.Timers = []store.Timer{keep}
	mustCommitOK(t, repo, first)
	mustClaim(t, repo, a, "node-b") // claimA is stale now

	stale := newBatch(a, claimA.Epoch, 1, 1)
	stale.Timers = []store.Timer{timer(a, "stale", at.Add(-time.Minute))}
	stale.DoneTimers = []string{"keep"}
	okB := newBatch(b, claimB.Epoch, 0, 1)
	okB.Timers = []store.Timer{timer(b, "ok", at.Add(-time.Minute))}
	mustCommit(t, repo, []store.Batch{stale, okB}, store.ErrFenced, nil)
	assertTimers(t, mustDueTimers(t, repo, a, at), keep)
	assertTimers(t, mustDueTimers(t, repo, b, at), okB.Timers[0])

	// A duplicate command id refuses its batch alone: the others' timers
	// are still set (the adapters commit batch by batch then).
	c, claimC := newClaimedRoom(t, repo)
	dup := newBatch(b, claimB.Epoch, 1, 1)
	dup.Commands[0].CommandID = command(b, 1).CommandID
	dup.Timers = []store.Timer{timer(b, "dup", at.Add(-time.Minute))}
	dup.DoneTimers = []string{"ok"}
	okC := newBatch(c, claimC.Epoch, 0, 1)
	okC.Timers = []store.Timer{timer(c, "ok", at.Add(-time.Minute))}
	mustCommit(t, repo, []store.Batch{dup, okC}, store.ErrConflict, nil)
	assertTimers(t, mustDueTimers(t, repo, b, at), okB.Timers[0])
	assertTimers(t, mustDueTimers(t, repo, c, at), okC.Timers[0])

	// A timer that names another room refuses its batch.
	other := newBatch(c, claimC.Epoch, 1, 1)
	other.Timers = []store.Timer{timer(b, "other", at.Add(-time.Minute))}
	mustCommit(t, repo, []store.Batch{other}, store.ErrConflict)
	assertTimers(t, mustDueTimers(t, repo, b, at), okB.Timers[0])
	assertUntouchedHead(t, repo, c, 1)

	// Enough rooms in one call that an implementation may fence them all at
	// once: the fenced room's timer is not set, the others' are.
	var batches []store.Batch
	var want []error
	for i := range 6 {
		id, claim := newClaimedRoom(t, repo)
		nb := newBatch(id, claim.Epoch, 0, 1)
		nb.Timers = []store.Timer{timer(id, "many", at.Add(-time.Minute))}
		var w error
		if i == 2 {
			mustClaim(t, repo, id, "node-b")
			w = store.ErrFenced
		}
		batches, want = append(batches, nb), append(want, w)
	}
	mustCommit(t, repo, batches, want...)
	for i, nb := range batches {
		if i == 2 {
			assertTimers(t, mustDueTimers(t, repo, nb.RoomID, at))
			continue
		}
		assertTimers(t, mustDueTimers(t, repo, nb.RoomID, at), nb.Timers[0])
	}
}

// DoneTimers delete in the batch's commit, before its Timers are set; the
// batches of one call apply in order, each to its own room only.
func testTimersDoneInTheSameCommit(t *testing.T, repo store.Repository) {
	at := now().Add(-time.Hour)
	a, claimA := newClaimedRoom(t, repo)
	b, claimB := newClaimedRoom(t, repo)
	t1, t2, t3 := timer(a, "t1", at), timer(a, "t2", at.Add(time.Second)), timer(a, "t3", at.Add(2*time.Second))
	bt := timer(b, "t1", at)
	setA := newBatch(a, claimA.Epoch, 0, 1)
	setA.Timers = []store.Timer{t1, t2}
	setB := newBatch(b, claimB.Epoch, 0, 1)
	setB.Timers = []store.Timer{bt}
	mustCommitOK(t, repo, setA, setB)

	done := newBatch(a, claimA.Epoch, 1, 1)
	done.DoneTimers = []string{"t1", "missing"}
	done.Timers = []store.Timer{t3}
	mustCommitOK(t, repo, done)
	assertTimers(t, mustDueTimers(t, repo, a, now()), t2, t3)
	assertTimers(t, mustDueTimers(t, repo, b, now()), bt) // room b's t1 is not room a's

	// In one call: a timer set by one batch and done by the next is gone; a
	// timer done and set again is set; a batch without commands counts too.
	t4 := timer(a, "t4", at.Add(3*time.Second))
	again := timer(a, "t2", at.Add(4*time.Second))
	first := newBatch(a, claimA.Epoch, 2, 1)
	first.Timers = []store.Timer{t4}
	first.DoneTimers = []string{"t2"}
	second := store.Batch{RoomID: a, OwnerEpoch: claimA.Epoch, BaseVersion: 3, DoneTimers: []string{"t4"}}
	third := newBatch(a, claimA.Epoch, 3, 1)
	third.Timers = []store.Timer{again}
	mustCommitOK(t, repo, first, second, third)
	assertTimers(t, mustDueTimers(t, repo, a, now()), t3, again)

	// Done and set in one batch: deleted first, then set.
	both := newBatch(a, claimA.Epoch, 4, 1)
	both.DoneTimers = []string{"t3"}
	moved := timer(a, "t3", at.Add(5*time.Second))
	both.Timers = []store.Timer{moved}
	mustCommitOK(t, repo, both)
	assertTimers(t, mustDueTimers(t, repo, a, now()), again, moved)
}

func testDeleteTimers(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	at := now().Add(-time.Hour)
	a, claimA := newClaimedRoom(t, repo)
	b, claimB := newClaimedRoom(t, repo)
	ba := newBatch(a, claimA.Epoch, 0, 1)
	ba.Timers = []store.Timer{timer(a, "x", at), timer(a, "y", at), timer(a, "z", at)}
	bb := newBatch(b, claimB.Epoch, 0, 1)
	bb.Timers = []store.Timer{timer(b, "x", at)}
	mustCommitOK(t, repo, ba, bb)

	if err := repo.DeleteTimers(ctx, a, nil, time.Time{}); err != nil {
		t.Fatalf("DeleteTimers(no ids): %v", err)
	}
	if err := repo.DeleteTimers(ctx, a, []string{"x", "missing", "z"}, time.Time{}); err != nil {
		t.Fatalf("DeleteTimers: %v", err)
	}
	assertTimers(t, mustDueTimers(t, repo, a, now()), ba.Timers[1])
	assertTimers(t, mustDueTimers(t, repo, b, now()), bb.Timers[0])
	if err := repo.DeleteTimers(ctx, a, []string{"x"}, time.Time{}); err != nil {
		t.Fatalf("DeleteTimers(already deleted): %v", err)
	}
	if err := repo.DeleteTimers(ctx, newRoomID(t), []string{"x"}, time.Time{}); err != nil {
		t.Fatalf("DeleteTimers(unknown room): %v", err)
	}
	assertTimers(t, mustDueTimers(t, repo, a, now()), ba.Timers[1])

	// Due by a time: a timer set again for later since stays.
	if err := repo.DeleteTimers(ctx, a, []string{"y"}, at.Add(-time.Second)); err != nil {
		t.Fatalf("DeleteTimers(due before it): %v", err)
	}
	assertTimers(t, mustDueTimers(t, repo, a, now()), ba.Timers[1])
	if err := repo.DeleteTimers(ctx, a, []string{"y"}, at); err != nil {
		t.Fatalf("DeleteTimers(due by it): %v", err)
	}
	assertTimers(t, mustDueTimers(t, repo, a, now()))
}

func testPutTimers(t *testing.T, repo store.Repository) {
	ctx := t.Context()
	at := now().Add(-time.Hour)
	a, claimA := newClaimedRoom(t, repo)
	b := newRoomID(t) // no row needed: a timer names its room only
	set := newBatch(a, claimA.Epoch, 0, 1)
	set.Timers = []store.Timer{timer(a, "x", at)}
	mustCommitOK(t, repo, set)

	if err := repo.PutTimers(ctx, nil); err != nil {
		t.Fatalf("PutTimers(none): %v", err)
	}
	later := timer(a, "x", at.Add(time.Minute))
	later.Payload = []byte(`{"again":true}`)
	put := []store.Timer{later, timer(a, "y", at.Add(2*time.Minute)), timer(b, "x", at)}
	if err := repo.PutTimers(ctx, put); err != nil {
		t.Fatalf("PutTimers: %v", err)
	}
	assertTimers(t, mustDueTimers(t, repo, a, now()), put[0], put[1])
	assertTimers(t, mustDueTimers(t, repo, b, now()), put[2])
	// The old time no longer deletes the timer set again.
	if err := repo.DeleteTimers(ctx, a, []string{"x"}, at); err != nil {
		t.Fatalf("DeleteTimers: %v", err)
	}
	assertTimers(t, mustDueTimers(t, repo, a, now()), put[0], put[1])
}

// newRoomID returns a room id no other test uses: lower case (so byte order
// and case-insensitive collations agree), short, from the test name and a
// random suffix.
func newRoomID(t *testing.T) string {
	t.Helper()
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.ToLower(name)
	if len(name) > 24 {
		name = name[:24]
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random room id: %v", err)
	}
	return name + "-" + hex.EncodeToString(b[:])
}

// newEventType returns an event type no other test uses, so that a test can
// count and requeue its own dead rows in a shared database.
func newEventType(t *testing.T) string {
	t.Helper()
	return "Ev-" + newRoomID(t)
}

func now() time.Time { return time.Now().Truncate(time.Millisecond) }

func testMeta(id string) store.RoomMeta {
	return store.RoomMeta{RoomID: id, OwnerUserID: 1001, HostUserID: 1002, SeatCount: 8, Mode: "chat", Status: "active"}
}

func command(roomID string, version int64) store.CommandRecord {
	return store.CommandRecord{
		RoomID:      roomID,
		RoomVersion: version,
		CommandID:   fmt.Sprintf("c-%d", version),
		CommandType: "TakeMic",
		Payload:     fmt.Appendf(nil, `{"room":%q,"v":%d}`, roomID, version),
		Replayable:  true,
		CreatedAt:   now(),
	}
}

func event(roomID string, version int64, seq int32) outbox.Record {
	return outbox.Record{
		EventID:     outbox.EventID(roomID, version, seq),
		RoomID:      roomID,
		RoomVersion: version,
		Seq:         seq,
		EventType:   "RoomMicChanged",
		Payload:     fmt.Appendf(nil, `{"v":%d,"seq":%d}`, version, seq),
		OwnerEpoch:  1,
		CreatedAt:   now(),
	}
}

// newBatch returns a batch of n commands after base, one outbox row each.
func newBatch(roomID string, epoch, base int64, n int) store.Batch {
	b := store.Batch{RoomID: roomID, OwnerEpoch: epoch, BaseVersion: base}
	for v := base + 1; v <= base+int64(n); v++ {
		b.Commands = append(b.Commands, command(roomID, v))
		b.Outbox = append(b.Outbox, event(roomID, v, 0))
	}
	return b
}

func newClaimedRoom(t *testing.T, repo store.Repository) (string, store.Claim) {
	t.Helper()
	id := newRoomID(t)
	mustSaveMeta(t, repo, testMeta(id))
	return id, mustClaim(t, repo, id, "node-a")
}

func mustSaveMeta(t *testing.T, repo store.Repository, meta store.RoomMeta) {
	t.Helper()
	if err := repo.SaveRoomMeta(t.Context(), meta); err != nil {
		t.Fatalf("SaveRoomMeta(%s): %v", meta.RoomID, err)
	}
}

func mustGetMeta(t *testing.T, repo store.Repository, id string) store.RoomMeta {
	t.Helper()
	meta, found, err := repo.GetRoomMeta(t.Context(), id)
	if err != nil || !found {
		t.Fatalf("GetRoomMeta(%s) = found %v, err %v", id, found, err)
	}
	return meta
}

func mustClaim(t *testing.T, repo store.Repository, id, node string) store.Claim {
	t.Helper()
	c, err := repo.ClaimRoom(t.Context(), id, node)
	if err != nil {
		t.Fatalf("ClaimRoom(%s): %v", id, err)
	}
	return c
}

func mustSaveCommand(t *testing.T, repo store.Repository, c store.CommandRecord) {
	t.Helper()
	if err := repo.SaveCommand(t.Context(), c); err != nil {
		t.Fatalf("SaveCommand(%s v%d): %v", c.RoomID, c.RoomVersion, err)
	}
}

func mustListCommands(t *testing.T, repo store.Repository, id string, after int64) []store.CommandRecord {
	t.Helper()
	cmds, err := repo.ListCommandsAfter(t.Context(), id, after)
	if err != nil {
		t.Fatalf("ListCommandsAfter(%s, %d): %v", id, after, err)
	}
	return cmds
}

// mustCommit commits batches in one call and checks each result against
// want (nil: committed; otherwise errors.Is that sentinel).
func mustCommit(t *testing.T, repo store.Repository, batches []store.Batch, want ...error) {
	t.Helper()
	results, err := repo.CommitBatches(t.Context(), batches)
	if err != nil {
		t.Fatalf("CommitBatches: %v", err)
	}
	if len(results) != len(batches) {
		t.Fatalf("CommitBatches returned %d results for %d batches", len(results), len(batches))
	}
	for i, w := range want {
		if (w == nil && results[i] != nil) || (w != nil && !errors.Is(results[i], w)) {
			t.Fatalf("batch %d (room %s): result %v, want %v", i, batches[i].RoomID, results[i], w)
		}
	}
}

func mustCommitOK(t *testing.T, repo store.Repository, batches ...store.Batch) {
	t.Helper()
	mustCommit(t, repo, batches, make([]error, len(batches))...)
}

// mustPending lists the room's due pending rows, in id order.
func mustPending(t *testing.T, repo store.Repository, id string) []outbox.Record {
	t.Helper()
	now := time.Now()
	var due []outbox.Record
	for _, r := range mustRoomOutbox(t, repo, id, pendingLimit) {
		if !r.NextAttemptAt.After(now) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b outbox.Record) int { return cmp.Compare(a.ID, b.ID) })
	return due
}

func mustSaveOutbox(t *testing.T, repo store.Repository, rows ...outbox.Record) {
	t.Helper()
	if err := repo.SaveOutbox(t.Context(), rows); err != nil {
		t.Fatalf("SaveOutbox: %v", err)
	}
}

func mustRoomOutbox(t *testing.T, repo store.Repository, id string, limit int) []outbox.Record {
	t.Helper()
	rows, err := repo.ListRoomOutbox(t.Context(), id, limit)
	if err != nil {
		t.Fatalf("ListRoomOutbox(%s, %d): %v", id, limit, err)
	}
	return rows
}

// mustFail records a failed delivery and returns whether the row is dead now.
func mustFail(t *testing.T, repo store.Repository, eventID, msg string, next time.Time, maxAttempts int32) bool {
	t.Helper()
	dead, err := repo.FailOutbox(t.Context(), eventID, msg, next, maxAttempts)
	if err != nil {
		t.Fatalf("FailOutbox(%s): %v", eventID, err)
	}
	return dead
}

func mustStats(t *testing.T, repo store.Repository) store.OutboxStats {
	t.Helper()
	st, err := repo.OutboxStats(t.Context(), 1<<40)
	if err != nil {
		t.Fatalf("OutboxStats: %v", err)
	}
	if st.Dead == nil {
		t.Fatal("OutboxStats.Dead is nil, want a map")
	}
	if st.PublishedMore {
		t.Fatalf("OutboxStats(2^40) = %+v: more published rows than counted", st)
	}
	// The backlog is the same summary without the published rows' count.
	backlog, err := repo.OutboxStats(t.Context(), 0)
	if err != nil {
		t.Fatalf("OutboxStats(0): %v", err)
	}
	want := st
	want.Published = 0
	if backlog.Pending != want.Pending || !backlog.OldestPending.Equal(want.OldestPending) || !maps.Equal(backlog.Dead, want.Dead) ||
		backlog.Published != 0 || backlog.PublishedMore {
		t.Fatalf("OutboxStats(0) = %+v, want OutboxStats %+v without the published count", backlog, st)
	}
	return st
}

func assertStats(t *testing.T, got store.OutboxStats, pending int64, oldest time.Time, dead map[string]int64, published int64) {
	t.Helper()
	if got.Pending != pending || !got.OldestPending.Equal(oldest) || !maps.Equal(got.Dead, dead) || got.Published != published {
		t.Fatalf("OutboxStats = %+v, want pending %d, oldest pending %v, dead %v, published %d", got, pending, oldest, dead, published)
	}
}

// mustRoomInfo finds the room through ListRooms, starting just before its id.
func mustRoomInfo(t *testing.T, repo store.Repository, id string) store.RoomInfo {
	t.Helper()
	rooms, err := repo.ListRooms(t.Context(), id[:len(id)-1], 16)
	if err != nil {
		t.Fatalf("ListRooms: %v", err)
	}
	for _, r := range rooms {
		if r.Meta.RoomID == id {
			return r
		}
	}
	t.Fatalf("room %s not listed", id)
	return store.RoomInfo{}
}

// assertUntouched checks that the room still has head, no commands after it,
// no pending rows, no snapshot and its original status.
func assertUntouched(t *testing.T, repo store.Repository, id string, head int64) {
	t.Helper()
	if info := mustRoomInfo(t, repo, id); info.HeadVersion != head {
		t.Fatalf("room %s head = %d, want %d", id, info.HeadVersion, head)
	}
	if cmds := mustListCommands(t, repo, id, head); len(cmds) != 0 {
		t.Fatalf("room %s has commands after %d: %+v", id, head, cmds)
	}
	if rows := mustPending(t, repo, id); len(rows) != 0 {
		t.Fatalf("room %s has pending rows %v", id, eventIDs(rows))
	}
	if _, found, err := repo.GetLatestSnapshot(t.Context(), id); err != nil || found {
		t.Fatalf("room %s snapshot: found %v, err %v; want none", id, found, err)
	}
	if got := mustGetMeta(t, repo, id); got.Status != testMeta(id).Status {
		t.Fatalf("room %s status = %q, want %q", id, got.Status, testMeta(id).Status)
	}
}

func assertSnapshot(t *testing.T, repo store.Repository, id string, version int64, payload string) {
	t.Helper()
	s, found, err := repo.GetLatestSnapshot(t.Context(), id)
	if err != nil || !found {
		t.Fatalf("GetLatestSnapshot(%s) = found %v, err %v", id, found, err)
	}
	if s.RoomID != id || s.RoomVersion != version || string(s.Payload) != payload || s.CreatedAt.IsZero() {
		t.Fatalf("snapshot = v%d %q (room %s, created %v), want v%d %q", s.RoomVersion, s.Payload, s.RoomID, s.CreatedAt, version, payload)
	}
}

func assertCommands(t *testing.T, got, want []store.CommandRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d commands, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.RoomID != w.RoomID || g.RoomVersion != w.RoomVersion || g.CommandID != w.CommandID ||
			g.CommandType != w.CommandType || !bytes.Equal(g.Payload, w.Payload) || g.Replayable != w.Replayable ||
			!g.CreatedAt.Equal(w.CreatedAt) {
			t.Fatalf("command %d = %+v, want %+v", i, g, w)
		}
	}
}

func timer(roomID, timerID string, fireAt time.Time) store.Timer {
	return store.Timer{
		RoomID: roomID, TimerID: timerID, Kind: "test_kind", FireAt: fireAt,
		Payload: fmt.Appendf(nil, `{"room":%q,"timer":%q}`, roomID, timerID), CreatedAt: now(),
	}
}

// mustDueTimers lists the timers due at or before before, checks the whole
// listing is in fire time order and returns the room's.
func mustDueTimers(t *testing.T, repo store.Repository, id string, before time.Time) []store.Timer {
	t.Helper()
	all, err := repo.ListDueTimers(t.Context(), "", before, pendingLimit)
	if err != nil {
		t.Fatalf("ListDueTimers: %v", err)
	}
	var mine []store.Timer
	for i, tm := range all {
		if tm.FireAt.After(before) {
			t.Fatalf("ListDueTimers(%v) listed %s/%s due at %v", before, tm.RoomID, tm.TimerID, tm.FireAt)
		}
		if i > 0 && tm.FireAt.Before(all[i-1].FireAt) {
			t.Fatalf("ListDueTimers: %v listed after %v, want oldest first", tm.FireAt, all[i-1].FireAt)
		}
		if tm.RoomID == id {
			mine = append(mine, tm)
		}
	}
	return mine
}

func assertTimers(t *testing.T, got []store.Timer, want ...store.Timer) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d timers %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.RoomID != w.RoomID || g.TimerID != w.TimerID || g.Kind != w.Kind || !g.FireAt.Equal(w.FireAt) ||
			!bytes.Equal(g.Payload, w.Payload) || !g.CreatedAt.Equal(w.CreatedAt) {
			t.Fatalf("timer %d = %+v, want %+v", i, g, w)
		}
	}
}

// assertUntouchedHead checks that the room's head is still head.
func assertUntouchedHead(t *testing.T, repo store.Repository, id string, head int64) {
	t.Helper()
	if info := mustRoomInfo(t, repo, id); info.HeadVersion != head {
		t.Fatalf("room %s head = %d, want %d", id, info.HeadVersion, head)
	}
}

func findEvent(rows []outbox.Record, eventID string) (outbox.Record, bool) {
	for _, r := range rows {
		if r.EventID == eventID {
			return r, true
		}
	}
	return outbox.Record{}, false
}

func eventIDs(rows []outbox.Record) []string {
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.EventID)
	}
	return ids
}
