package rpc_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"hyapp/room-service/auth"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/rpc"
)

// hotPages pages through the hot list and fails on a page over size.
func (s *stack) hotPages(t *testing.T, req *roomv1.ListRoomsRequest) []*roomv1.RoomSummary {
	t.Helper()
	var out []*roomv1.RoomSummary
	for range 100 {
		res := must(t, s.rooms.ListRooms, req)
		if int32(len(res.GetRooms())) > req.GetPageSize() {
			t.Fatalf("a page of size %d holds %d rooms", req.GetPageSize(), len(res.GetRooms()))
		}
		out = append(out, res.GetRooms()...)
		if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
			return out
		}
	}
	t.Fatal("the hot list never ended")
	return nil
}

// TestHotList: the lobby's list catches up with commands within seconds,
// filters by region, mode and status, and pages through each order without
// showing a room twice or missing one.
func TestHotList(t *testing.T) {
	s := start(t)
	// Room i has i+1 members; rooms 0..3 are in region sa, the others eg.
	const rooms = 7
	for i := range rooms {
		id := fmt.Sprint("room-", i)
		region, mode := "sa", "chat"
		if i >= 4 {
			region = "eg"
		}
		if i%2 == 1 {
			mode = "game"
		}
		must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: id, CommandId: "c", OperatorUserId: 1, OwnerUserId: 1,
			SeatCount: 8, Region: region, Mode: mode, Title: "title " + id})
		for u := range i + 1 {
			must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: id, CommandId: fmt.Sprint("j", u), OperatorUserId: int64(100 + u)})
		}
	}
	// Heat: a gift of (7-i) roses to a seated member of room i, so heat runs the other way round.
	must(t, s.wallets.CreditCoins, &roomv1.CreditCoinsRequest{UserId: 100, Amount: 1000, IdempotencyKey: "k"})
	for i := range rooms {
		id := fmt.Sprint("room-", i)
		must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: id, CommandId: "sender", OperatorUserId: 99})
		must(t, s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: id, CommandId: "mic", OperatorUserId: 100, SeatIndex: 1})
		for g := range rooms - i {
			must(t, s.wallets.CreditCoins, &roomv1.CreditCoinsRequest{UserId: 99, Amount: 1, IdempotencyKey: fmt.Sprint(id, g)})
			must(t, s.rooms.SendGift, &roomv1.SendGiftRequest{RoomId: id, CommandId: fmt.Sprint("g", g), OperatorUserId: 99,
				ReceiverUserIds: []int64{100}, GiftId: "rose", Count: 1})
		}
	}
	must(t, s.rooms.CloseRoom, &roomv1.CloseRoomRequest{RoomId: "room-6", CommandId: "close", OperatorUserId: 1})

	online := &roomv1.ListRoomsRequest{OrderBy: roomv1.RoomOrder_ROOM_ORDER_ONLINE, PageSize: 500}
	poll.Until(t, 5*time.Second, "the hot list shows every open room's members and heat", func() error {
		got := must(t, s.rooms.ListRooms, online).GetRooms()
		if len(got) != rooms-1 {
			return fmt.Errorf("%d open rooms listed", len(got))
		}
		for _, r := range got {
			i, _ := strconv.Atoi(r.GetRoomId()[len("room-"):])
			if r.GetOnlineCount() != int32(i+2) || r.GetHeat() != int64(rooms-i) || r.GetSeatsTaken() != 1 {
				return fmt.Errorf("%s: online %d heat %d seats %d", r.GetRoomId(), r.GetOnlineCount(), r.GetHeat(), r.GetSeatsTaken())
			}
		}
		return nil
	})

	first := must(t, s.rooms.ListRooms, online).GetRooms()[0]
	if first.GetRoomId() != "room-5" || first.GetTitle() != "title room-5" || first.GetRegion() != "eg" || first.GetMode() != "game" ||
		first.GetOwnerUserId() != 1 || first.GetCreatedAtMs() == 0 || first.GetLastActiveAtMs() < first.GetCreatedAtMs() ||
		first.GetStatus() != roomv1.RoomStatus_ROOM_STATUS_OPEN || first.GetOwnerEpoch() == 0 || first.GetOwnerNode() != "node-1" {
		t.Fatalf("the busiest open room is shown as %v", first)
	}

	orders := map[roomv1.RoomOrder]func(*roomv1.RoomSummary) int64{
		roomv1.RoomOrder_ROOM_ORDER_HEAT:   (*roomv1.RoomSummary).GetHeat,
		roomv1.RoomOrder_ROOM_ORDER_ONLINE: func(r *roomv1.RoomSummary) int64 { return int64(r.GetOnlineCount()) },
		roomv1.RoomOrder_ROOM_ORDER_NEWEST: (*roomv1.RoomSummary).GetCreatedAtMs,
	}
	for order, value := range orders {
		for _, f := range []struct {
			region, mode string
			status       roomv1.RoomStatus
			want         []string
		}{
			{"", "", 0, []string{"room-0", "room-1", "room-2", "room-3", "room-4", "room-5"}},
			{"sa", "", 0, []string{"room-0", "room-1", "room-2", "room-3"}},
			{"sa", "game", 0, []string{"room-1", "room-3"}},
			{"", "chat", 0, []string{"room-0", "room-2", "room-4"}},
			{"", "", roomv1.RoomStatus_ROOM_STATUS_CLOSED, []string{"room-6"}},
		} {
			got := s.hotPages(t, &roomv1.ListRoomsRequest{OrderBy: order, PageSize: 2, Region: f.region, Mode: f.mode, Status: f.status})
			if !slices.IsSortedFunc(got, func(a, b *roomv1.RoomSummary) int {
				if value(a) != value(b) {
					return int(value(b) - value(a))
				}
				return strings.Compare(b.GetRoomId(), a.GetRoomId()) // ties: room ids descending
			}) {
				t.Errorf("order %v %+v: not sorted: %v", order, f, ids(got))
			}
			sorted := slices.Sorted(slices.Values(ids(got)))
			if !slices.Equal(sorted, f.want) {
				t.Errorf("order %v region %q mode %q status %v: listed %v, want each of %v once", order, f.region, f.mode, f.status, ids(got), f.want)
			}
		}
	}

	// Bad requests have their reasons.
	heat := must(t, s.rooms.ListRooms, &roomv1.ListRoomsRequest{OrderBy: roomv1.RoomOrder_ROOM_ORDER_HEAT, PageSize: 1})
	for _, c := range []struct {
		name   string
		req    *roomv1.ListRoomsRequest
		reason string
	}{
		{"unknown order", &roomv1.ListRoomsRequest{OrderBy: 99}, "invalid_order"},
		{"page size", &roomv1.ListRoomsRequest{OrderBy: roomv1.RoomOrder_ROOM_ORDER_HEAT, PageSize: 501}, "invalid_page_size"},
		{"garbage token", &roomv1.ListRoomsRequest{OrderBy: roomv1.RoomOrder_ROOM_ORDER_HEAT, PageToken: "@@"}, "invalid_page_token"},
		{"token of another order", &roomv1.ListRoomsRequest{OrderBy: roomv1.RoomOrder_ROOM_ORDER_ONLINE, PageToken: heat.GetNextPageToken()}, "invalid_page_token"},
		{"token of another filter", &roomv1.ListRoomsRequest{OrderBy: roomv1.RoomOrder_ROOM_ORDER_HEAT, Region: "sa", PageToken: heat.GetNextPageToken()}, "invalid_page_token"},
		{"region without order", &roomv1.ListRoomsRequest{Region: "sa"}, "invalid_argument"},
	} {
		_, err := s.rooms.ListRooms(context.Background(), connect.NewRequest(c.req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || rpc.Reason(err) != c.reason {
			t.Errorf("%s: %v (reason %q), want %s", c.name, err, rpc.Reason(err), c.reason)
		}
	}

	// The operator listing keeps its order and shows the lobby's fields too.
	all := s.listAll(t, 0, 3)
	if len(all) != rooms || all[0].GetRoomId() != "room-0" || all[0].GetOnlineCount() != 2 || all[0].GetTitle() != "title room-0" {
		t.Fatalf("operator listing: %v", all)
	}
}

// TestListMembers pages through a room's members by join time and by the
// day's contribution; a member joining between pages does not shift them.
func TestListMembers(t *testing.T) {
	s := start(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r", CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	// Users join in descending id order, so join order differs from id order
	// wherever the joins fall in different milliseconds.
	for u := int64(20); u > 10; u-- {
		must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r", CommandId: fmt.Sprint("j", u), OperatorUserId: u})
	}
	must(t, s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r", CommandId: "mic", OperatorUserId: 20, SeatIndex: 0})
	for u := int64(11); u <= 13; u++ { // 11 gives 1 rose, 12 gives 2, 13 gives 3
		must(t, s.wallets.CreditCoins, &roomv1.CreditCoinsRequest{UserId: u, Amount: 100, IdempotencyKey: fmt.Sprint("k", u)})
		for g := range u - 10 {
			must(t, s.rooms.SendGift, &roomv1.SendGiftRequest{RoomId: "r", CommandId: fmt.Sprint("g", u, "-", g), OperatorUserId: u,
				ReceiverUserIds: []int64{20}, GiftId: "rose", Count: 1})
		}
	}
	page := func(order roomv1.MemberOrder, tok string) *roomv1.ListMembersResponse {
		return must(t, s.rooms.ListMembers, &roomv1.ListMembersRequest{RoomId: "r", Limit: 3, OrderBy: order, PageToken: tok})
	}
	list := func(order roomv1.MemberOrder, between func()) []int64 {
		var out []int64
		tok := ""
		for range 20 {
			res := page(order, tok)
			if len(res.GetMembers()) > 3 || res.GetOnlineCount() < 10 {
				t.Fatalf("page %v", res)
			}
			for _, m := range res.GetMembers() {
				out = append(out, m.GetMember().GetUserId())
			}
			if tok = res.GetNextPageToken(); tok == "" {
				return out
			}
			if between != nil {
				between()
				between = nil
			}
		}
		t.Fatal("ListMembers never ended")
		return nil
	}
	joined := list(roomv1.MemberOrder_MEMBER_ORDER_JOINED, func() {
		must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r", CommandId: "late", OperatorUserId: 5})
	})
	// Joins in one millisecond tie and go by user id, so the order depends on
	// how fast the joins ran: the snapshot says what it must be.
	members := s.snapshot(t, "r").GetMembers()
	slices.SortFunc(members, func(a, b *roomv1.Member) int {
		return cmp.Or(cmp.Compare(a.GetJoinedAtMs(), b.GetJoinedAtMs()), cmp.Compare(a.GetUserId(), b.GetUserId()))
	})
	var want []int64
	for _, m := range members {
		want = append(want, m.GetUserId())
	}
	if len(want) != 11 || !slices.Equal(joined, want) {
		t.Fatalf("by join time: %v, want %v", joined, want)
	}
	byGift := list(roomv1.MemberOrder_MEMBER_ORDER_CONTRIBUTION, nil)
	if want := []int64{13, 12, 11, 5, 14, 15, 16, 17, 18, 19, 20}; !slices.Equal(byGift, want) {
		t.Fatalf("by contribution: %v, want %v", byGift, want)
	}
	if top := page(roomv1.MemberOrder_MEMBER_ORDER_CONTRIBUTION, "").GetMembers()[0]; top.GetContribution() != 3 {
		t.Fatalf("top contributor %v", top)
	}
	for _, c := range []struct {
		name   string
		req    *roomv1.ListMembersRequest
		reason string
	}{
		{"limit", &roomv1.ListMembersRequest{RoomId: "r", Limit: 501}, "invalid_page_size"},
		{"order", &roomv1.ListMembersRequest{RoomId: "r", OrderBy: 7}, "invalid_order"},
		{"token", &roomv1.ListMembersRequest{RoomId: "r", PageToken: "bm9wZQ"}, "invalid_page_token"},
		{"token of the other order", &roomv1.ListMembersRequest{RoomId: "r", PageToken: page(roomv1.MemberOrder_MEMBER_ORDER_CONTRIBUTION, "").GetNextPageToken()}, "invalid_page_token"},
	} {
		_, err := s.rooms.ListMembers(context.Background(), connect.NewRequest(c.req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || rpc.Reason(err) != c.reason {
			t.Errorf("%s: %v (reason %q), want %s", c.name, err, rpc.Reason(err), c.reason)
		}
	}
	_, err := s.rooms.ListMembers(context.Background(), connect.NewRequest(&roomv1.ListMembersRequest{RoomId: "nope"}))
	wantErr(t, err, connect.CodeNotFound, "room_not_found")
}

// TestGiftRecordsWalletEntriesAndShortBalance: gifts are recorded per
// receiver and listed newest first by room, sender and receiver; the
// journal lists newest first; a gift the balance does not cover says by how
// much; a user lists only their own records and entries.
func TestGiftRecordsWalletEntriesAndShortBalance(t *testing.T) {
	s, _ := startScoped(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r", CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	for _, u := range []int64{7, 8, 9} {
		must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r", CommandId: fmt.Sprint("j", u), OperatorUserId: u})
	}
	must(t, s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r", CommandId: "m8", OperatorUserId: 8, SeatIndex: 0})
	must(t, s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r", CommandId: "m9", OperatorUserId: 9, SeatIndex: 1})
	must(t, s.wallets.CreditCoins, &roomv1.CreditCoinsRequest{UserId: 7, Amount: 25, IdempotencyKey: "top-up"})
	for g := range 5 { // five sends of one heart (10) to 8 and 9 cost 20 each: two go through
		_, err := s.rooms.SendGift(context.Background(), connect.NewRequest(&roomv1.SendGiftRequest{RoomId: "r", CommandId: fmt.Sprint("g", g),
			OperatorUserId: 7, ReceiverUserIds: []int64{8, 9}, GiftId: "heart", Count: 1}))
		if g == 0 {
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		// 5 left after the first: every later send is short by 15.
		wantErr(t, err, connect.CodeFailedPrecondition, "insufficient_balance")
		if md := rpc.ErrorMetadata(err); md["balance"] != "5" || md["needed"] != "20" {
			t.Fatalf("insufficient_balance metadata %v, want balance 5 and needed 20", md)
		}
	}
	must(t, s.wallets.CreditCoins, &roomv1.CreditCoinsRequest{UserId: 7, Amount: 100, IdempotencyKey: "top-up-2"})
	for g := 1; g < 4; g++ {
		must(t, s.rooms.SendGift, &roomv1.SendGiftRequest{RoomId: "r", CommandId: fmt.Sprint("again", g),
			OperatorUserId: 7, ReceiverUserIds: []int64{8, 9}, GiftId: "heart", Count: 1})
	}
	records := func(req *roomv1.ListGiftRecordsRequest) []*roomv1.GiftRecord {
		var out []*roomv1.GiftRecord
		for range 20 {
			res := must(t, s.rooms.ListGiftRecords, req)
			if len(res.GetRecords()) > int(req.GetLimit()) {
				t.Fatalf("page over the limit: %v", res)
			}
			out = append(out, res.GetRecords()...)
			if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
				return out
			}
		}
		t.Fatal("ListGiftRecords never ended")
		return nil
	}
	byRoom := records(&roomv1.ListGiftRecordsRequest{RoomId: "r", Limit: 3})
	if len(byRoom) != 8 || !slices.IsSortedFunc(byRoom, func(a, b *roomv1.GiftRecord) int { return int(b.GetRecordId() - a.GetRecordId()) }) {
		t.Fatalf("by room: %v", byRoom)
	}
	if r := byRoom[0]; r.GetCommandId() != "again3" || r.GetSenderUserId() != 7 || r.GetGiftId() != "heart" || r.GetValue() != 10 || r.GetSentAtMs() == 0 {
		t.Fatalf("newest record %v", r)
	}
	if sent := records(&roomv1.ListGiftRecordsRequest{UserId: 7, Limit: 2}); len(sent) != 8 {
		t.Fatalf("sent by 7: %d records", len(sent))
	}
	received := records(&roomv1.ListGiftRecordsRequest{UserId: 9, Received: true, Limit: 2})
	if len(received) != 4 || received[0].GetReceiverUserId() != 9 || received[3].GetCommandId() != "g0" {
		t.Fatalf("received by 9: %v", received)
	}
	if none := records(&roomv1.ListGiftRecordsRequest{UserId: 9, Limit: 2}); len(none) != 0 {
		t.Fatalf("sent by 9: %v", none)
	}

	var entries []*roomv1.WalletEntry
	req := &roomv1.ListWalletEntriesRequest{UserId: 7, Limit: 2}
	for range 20 {
		res := must(t, s.wallets.ListWalletEntries, req)
		entries = append(entries, res.GetEntries()...)
		if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	var kinds []string
	for _, e := range entries {
		kinds = append(kinds, fmt.Sprint(e.GetKind(), e.GetAmount(), "=", e.GetBalanceAfter()))
	}
	want := []string{"gift_debit-20=45", "gift_debit-20=65", "gift_debit-20=85", "credit100=105", "gift_debit-20=5", "credit25=25"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("journal of 7, newest first: %v, want %v", kinds, want)
	}

	for _, c := range []struct {
		name   string
		call   func(context.Context) error
		reason string
	}{
		{"room and user", call(s.rooms.ListGiftRecords, &roomv1.ListGiftRecordsRequest{RoomId: "r", UserId: 7}), "invalid_argument"},
		{"neither", call(s.rooms.ListGiftRecords, &roomv1.ListGiftRecordsRequest{}), "invalid_argument"},
		{"received by room", call(s.rooms.ListGiftRecords, &roomv1.ListGiftRecordsRequest{RoomId: "r", Received: true}), "invalid_argument"},
		{"records limit", call(s.rooms.ListGiftRecords, &roomv1.ListGiftRecordsRequest{RoomId: "r", Limit: -1}), "invalid_page_size"},
		{"records token of another query", call(s.rooms.ListGiftRecords, &roomv1.ListGiftRecordsRequest{RoomId: "other",
			PageToken: must(t, s.rooms.ListGiftRecords, &roomv1.ListGiftRecordsRequest{RoomId: "r", Limit: 1}).GetNextPageToken()}), "invalid_page_token"},
		{"entries user", call(s.wallets.ListWalletEntries, &roomv1.ListWalletEntriesRequest{}), "invalid_argument"},
		{"entries limit", call(s.wallets.ListWalletEntries, &roomv1.ListWalletEntriesRequest{UserId: 7, Limit: 501}), "invalid_page_size"},
		{"entries token", call(s.wallets.ListWalletEntries, &roomv1.ListWalletEntriesRequest{UserId: 8, PageToken: "eHw"}), "invalid_page_token"},
	} {
		if err := c.call(context.Background()); connect.CodeOf(err) != connect.CodeInvalidArgument || rpc.Reason(err) != c.reason {
			t.Errorf("%s: %v (reason %q), want %s", c.name, err, rpc.Reason(err), c.reason)
		}
	}

	// A gateway acting for user 8 lists 8's own records and entries only.
	gwRooms := roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken("gw"+scopeToken(auth.Room)), withHeaders(rpc.UserHeader, assertion(t, 8)))
	gwWallets := roomv1connect.NewWalletServiceClient(s.h1, s.base, withToken("gw"+scopeToken(auth.Room)), withHeaders(rpc.UserHeader, assertion(t, 8)))
	ctx := context.Background()
	if res, err := gwRooms.ListGiftRecords(ctx, connect.NewRequest(&roomv1.ListGiftRecordsRequest{UserId: 8, Received: true})); err != nil || len(res.Msg.GetRecords()) != 4 {
		t.Fatalf("own records: %v %v", res, err)
	}
	_, err := gwRooms.ListGiftRecords(ctx, connect.NewRequest(&roomv1.ListGiftRecordsRequest{UserId: 7}))
	wantErr(t, err, connect.CodePermissionDenied, "operator_mismatch")
	_, err = gwRooms.ListGiftRecords(ctx, connect.NewRequest(&roomv1.ListGiftRecordsRequest{RoomId: "r"}))
	wantErr(t, err, connect.CodePermissionDenied, "operator_mismatch")
	if _, err := gwWallets.ListWalletEntries(ctx, connect.NewRequest(&roomv1.ListWalletEntriesRequest{UserId: 8})); err != nil {
		t.Fatalf("own entries: %v", err)
	}
	_, err = gwWallets.ListWalletEntries(ctx, connect.NewRequest(&roomv1.ListWalletEntriesRequest{UserId: 7}))
	wantErr(t, err, connect.CodePermissionDenied, "operator_mismatch")
	if _, err := gwRooms.ListMembers(ctx, connect.NewRequest(&roomv1.ListMembersRequest{RoomId: "r"})); err != nil {
		t.Fatalf("members: %v", err)
	}
}
