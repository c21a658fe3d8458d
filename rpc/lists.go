package rpc

import (
	"cmp"
	"context"
	"encoding/base64"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
)

// Reasons of the paged lists.
var (
	ErrInvalidPageToken = &room.Error{Code: room.CodeInvalid, Reason: "invalid_page_token", Message: "the page token is not one this list gave for this request"}
	ErrInvalidPageSize  = &room.Error{Code: room.CodeInvalid, Reason: "invalid_page_size", Message: "the page size or limit is out of range"}
	ErrInvalidOrder     = &room.Error{Code: room.CodeInvalid, Reason: "invalid_order", Message: "the order is not one of the list's orders"}
	// ErrListNotServed: this node has no store for the list (a remote
	// wallet keeps its own journal).
	ErrListNotServed = &room.Error{Code: room.CodeUnimplemented, Reason: "list_not_served", Message: "this node does not serve this list"}
)

// Page sizes of every list: ListRooms, ListMembers, ListGiftRecords and
// ListWalletEntries.
const (
	defaultPageSize = 100
	maxPageSize     = 500
)

// pageSize checks a requested page size: 0 is the default.
func pageSize(n int32) (int, error) {
	switch {
	case n < 0 || n > maxPageSize:
		return 0, room.Errorf(ErrInvalidPageSize, "must be 0..%d (0: %d)", maxPageSize, defaultPageSize)
	case n == 0:
		return defaultPageSize, nil
	}
	return int(n), nil
}

// A page token is "<kind>|<value>|<id>" in URL-safe base64: kind names the
// list, its order and a digest of its filters, so a token is refused by a
// request it was not made for; value and id are the keyset position.
func pageToken(kind string, value int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "|" + strconv.FormatInt(value, 10) + "|" + id))
}

// readPageToken decodes a token made for kind; ok is false for "" (the first page).
func readPageToken(token, kind string) (value int64, id string, ok bool, err error) {
	if token == "" {
		return 0, "", false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, "", false, ErrInvalidPageToken
	}
	k, rest, found := strings.Cut(string(raw), "|")
	if !found || k != kind {
		return 0, "", false, ErrInvalidPageToken
	}
	v, id, found := strings.Cut(rest, "|")
	value, perr := strconv.ParseInt(v, 10, 64)
	if !found || perr != nil {
		return 0, "", false, ErrInvalidPageToken
	}
	return value, id, true, nil
}

// digest names a list's filters in its page tokens.
func digest(parts ...string) string {
	h := fnv.New32a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return strconv.FormatUint(uint64(h.Sum32()), 36)
}

// DirectoryReader reads the room directory (a *sqlstore.DB serves it).
type DirectoryReader interface {
	// ListDirectory lists directory rows in one consistent read.
	ListDirectory(ctx context.Context, q store.DirectoryQuery) ([]store.DirectoryRow, error)
	// GetDirectory reads the rows of the rooms among roomIDs, keyed by room id.
	GetDirectory(ctx context.Context, roomIDs []string) (map[string]store.DirectoryRow, error)
}

// GiftRecordReader reads gift records (a *sqlstore.DB serves it).
type GiftRecordReader interface {
	// ListGiftRecords lists gift records newest first.
	ListGiftRecords(ctx context.Context, q store.GiftRecordQuery) ([]store.GiftRecord, error)
}

// Journal reads a wallet's journal (the embedded ledger serves it).
type Journal interface {
	// EntriesBefore lists up to limit of the user's entries with an id below
	// beforeEntryID (0: from the newest), newest first.
	EntriesBefore(ctx context.Context, userID int64, beforeEntryID int64, limit int) ([]wallet.Entry, error)
}

// hotOrders are the hot list's orders.
var hotOrders = map[roomv1.RoomOrder]store.DirectoryOrder{
	roomv1.RoomOrder_ROOM_ORDER_HEAT:   store.OrderHeat,
	roomv1.RoomOrder_ROOM_ORDER_ONLINE: store.OrderOnline,
	roomv1.RoomOrder_ROOM_ORDER_NEWEST: store.OrderNewest,
}

// listHot serves ListRooms with an order: the lobby's hot list, read from
// the room directory on this node (every node reads the same table).
func (h *RoomHandler) listHot(ctx context.Context, m *roomv1.ListRoomsRequest, size int) (*connect.Response[roomv1.ListRoomsResponse], error) {
	order, ok := hotOrders[m.GetOrderBy()]
	if !ok {
		return nil, toConnect(ctx, h.log, room.Errorf(ErrInvalidOrder, "unknown order_by %d", m.GetOrderBy()))
	}
	if h.directory == nil {
		return nil, toConnect(ctx, h.log, room.Errorf(ErrListNotServed, "no room directory"))
	}
	status := room.StatusOpen
	if m.GetStatus() != roomv1.RoomStatus_ROOM_STATUS_UNSPECIFIED {
		var ok bool
		if status, ok = snapshot.StatusFromProto(m.GetStatus()); !ok {
			return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "unknown status %d", m.GetStatus()))
		}
	}
	kind := "r" + strconv.Itoa(int(m.GetOrderBy())) + digest(string(status), m.GetRegion(), m.GetMode())
	value, after, more, err := readPageToken(m.GetPageToken(), kind)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	q := store.DirectoryQuery{Order: order, Status: string(status), Region: m.GetRegion(), Mode: m.GetMode(), Limit: size}
	if more {
		q.After = &store.DirectoryCursor{Value: value, RoomID: after}
	}
	rows, err := h.directory.ListDirectory(ctx, q)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.ListRoomsResponse{Rooms: make([]*roomv1.RoomSummary, 0, len(rows))}
	for i := range rows {
		out.Rooms = append(out.Rooms, directorySummary(&rows[i]))
	}
	if len(rows) == size {
		last := &rows[len(rows)-1]
		out.NextPageToken = pageToken(kind, last.Value(order), last.RoomID)
	}
	return connect.NewResponse(out), nil
}

// directorySummary is a directory row as the API shows it.
func directorySummary(r *store.DirectoryRow) *roomv1.RoomSummary {
	s := &roomv1.RoomSummary{
		RoomId: r.RoomID, OwnerUserId: r.OwnerUserID, HostUserId: r.HostUserID, SeatCount: r.SeatCount, Mode: r.Mode,
		Status: snapshot.StatusToProto(room.Status(r.Status)), RoomVersion: r.RoomVersion, OwnerEpoch: r.OwnerEpoch, OwnerNode: r.OwnerNode,
	}
	withDirectory(s, r)
	return s
}

// withDirectory fills the lobby's fields of s from the room's directory row.
func withDirectory(s *roomv1.RoomSummary, r *store.DirectoryRow) {
	s.Title, s.CoverUrl, s.Region = r.Title, r.CoverURL, r.Region
	s.OnlineCount, s.SeatsTaken, s.Heat = r.OnlineCount, r.SeatsTaken, r.Heat
	s.CreatedAtMs, s.LastActiveAtMs = r.CreatedAt, r.LastActiveAt
}

// memberKey is a member's position in a ListMembers order.
type memberKey struct {
	value int64 // joined_at, or the contribution negated (highest first)
	user  int64
}

func compareMemberKey(a, b memberKey) int {
	return cmp.Or(cmp.Compare(a.value, b.value), cmp.Compare(a.user, b.user))
}

// ListMembers implements RoomService. The owner answers from the room's
// state at its committed head (the snapshot reads answer from).
func (h *RoomHandler) ListMembers(ctx context.Context, r *connect.Request[roomv1.ListMembersRequest]) (*connect.Response[roomv1.ListMembersResponse], error) {
	m := r.Msg
	if err := room.CheckRoomID(m.GetRoomId()); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	size, err := pageSize(m.GetLimit())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	byContribution := false
	switch m.GetOrderBy() {
	case roomv1.MemberOrder_MEMBER_ORDER_UNSPECIFIED, roomv1.MemberOrder_MEMBER_ORDER_JOINED:
	case roomv1.MemberOrder_MEMBER_ORDER_CONTRIBUTION:
		byContribution = true
	default:
		return nil, toConnect(ctx, h.log, room.Errorf(ErrInvalidOrder, "unknown order_by %d", m.GetOrderBy()))
	}
	kind := "m" + strconv.FormatBool(byContribution)
	value, after, more, err := readPageToken(m.GetPageToken(), kind)
	var from memberKey
	if err == nil && more {
		from.value = value
		from.user, err = strconv.ParseInt(after, 10, 64)
		if err != nil {
			err = ErrInvalidPageToken
		}
	}
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	snap, err := h.engine.Snapshot(ctx, m.GetRoomId())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	contrib := make(map[int64]int64, len(snap.GetEconomy().GetContributions()))
	for _, c := range snap.GetEconomy().GetContributions() {
		contrib[c.GetUserId()] = c.GetValue()
	}
	page := firstMembers(snap.GetMembers(), size+1, func(mb *roomv1.Member) (memberKey, bool) {
		k := memberKey{mb.GetJoinedAtMs(), mb.GetUserId()}
		if byContribution {
			k.value = -contrib[mb.GetUserId()]
		}
		return k, !more || compareMemberKey(k, from) > 0
	})
	out := &roomv1.ListMembersResponse{RoomVersion: snap.GetRoomVersion(), OnlineCount: snap.GetOnlineCount()}
	if len(page) > size {
		last := page[size-1].key
		out.NextPageToken = pageToken(kind, last.value, strconv.FormatInt(last.user, 10))
		page = page[:size]
	}
	out.Members = make([]*roomv1.MemberEntry, 0, len(page))
	for _, e := range page {
		out.Members = append(out.Members, &roomv1.MemberEntry{Member: e.member, Contribution: contrib[e.member.GetUserId()]})
	}
	return connect.NewResponse(out), nil
}

// keyedMember is a member and its position in a ListMembers order.
type keyedMember struct {
	key    memberKey
	member *roomv1.Member
}

// firstMembers returns, in order, the n members with the lowest keys among
// those key admits. A hot room holds up to 100,000 members and a page a few
// hundred: a bounded max-heap keeps the n lowest in one pass, without
// sorting the room.
func firstMembers(members []*roomv1.Member, n int, key func(*roomv1.Member) (memberKey, bool)) []keyedMember {
	h := make([]keyedMember, 0, min(n, len(members)))
	less := func(i, j int) bool { return compareMemberKey(h[i].key, h[j].key) > 0 } // max-heap
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(h) {
				return
			}
			if c+1 < len(h) && less(c+1, c) {
				c++
			}
			if !less(c, i) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for _, mb := range members {
		k, ok := key(mb)
		switch {
		case !ok:
		case len(h) < n:
			h = append(h, keyedMember{k, mb})
			for i := len(h) - 1; i > 0 && less(i, (i-1)/2); i = (i - 1) / 2 {
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
		case compareMemberKey(k, h[0].key) < 0:
			h[0] = keyedMember{k, mb}
			down(0)
		}
	}
	slices.SortFunc(h, func(a, b keyedMember) int { return compareMemberKey(a.key, b.key) })
	return h
}

// ListGiftRecords implements RoomService.
func (h *RoomHandler) ListGiftRecords(ctx context.Context, r *connect.Request[roomv1.ListGiftRecordsRequest]) (*connect.Response[roomv1.ListGiftRecordsResponse], error) {
	m := r.Msg
	byRoom := m.GetRoomId() != ""
	switch {
	case byRoom == (m.GetUserId() != 0):
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "name exactly one of room_id and user_id"))
	case byRoom && m.GetReceived():
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "received goes with user_id"))
	case !byRoom && m.GetUserId() < 0:
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "user_id must be positive"))
	}
	if byRoom {
		if err := room.CheckRoomID(m.GetRoomId()); err != nil {
			return nil, toConnect(ctx, h.log, err)
		}
	}
	size, err := pageSize(m.GetLimit())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	kind := "g" + digest(m.GetRoomId(), strconv.FormatInt(m.GetUserId(), 10), strconv.FormatBool(m.GetReceived()))
	before, _, _, err := readPageToken(m.GetPageToken(), kind)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	if h.giftRecords == nil {
		return nil, toConnect(ctx, h.log, room.Errorf(ErrListNotServed, "no gift records"))
	}
	recs, err := h.giftRecords.ListGiftRecords(ctx, store.GiftRecordQuery{
		RoomID: m.GetRoomId(), UserID: m.GetUserId(), Received: m.GetReceived(), BeforeID: before, Limit: size,
	})
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.ListGiftRecordsResponse{Records: make([]*roomv1.GiftRecord, 0, len(recs))}
	for _, g := range recs {
		out.Records = append(out.Records, &roomv1.GiftRecord{
			RecordId: g.RecordID, RoomId: g.RoomID, RoomVersion: g.RoomVersion, CommandId: g.CommandID,
			SenderUserId: g.SenderUserID, ReceiverUserId: g.ReceiverID, GiftId: g.GiftID, Count: g.Count,
			Value: g.Value, LuckyMultiplierBp: g.MultiplierBP, SentAtMs: g.SentAt,
		})
	}
	if len(recs) == size {
		out.NextPageToken = pageToken(kind, recs[len(recs)-1].RecordID, "")
	}
	return connect.NewResponse(out), nil
}

// ListWalletEntries implements WalletService.
func (h *WalletHandler) ListWalletEntries(ctx context.Context, r *connect.Request[roomv1.ListWalletEntriesRequest]) (*connect.Response[roomv1.ListWalletEntriesResponse], error) {
	m := r.Msg
	if m.GetUserId() <= 0 {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "user_id must be positive"))
	}
	size, err := pageSize(m.GetLimit())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	kind := "w" + strconv.FormatInt(m.GetUserId(), 10)
	before, _, _, err := readPageToken(m.GetPageToken(), kind)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	journal, ok := h.wallet.(Journal)
	if !ok {
		return nil, toConnect(ctx, h.log, room.Errorf(ErrListNotServed, "the wallet keeps no journal here"))
	}
	entries, err := journal.EntriesBefore(ctx, m.GetUserId(), before, size)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.ListWalletEntriesResponse{Entries: make([]*roomv1.WalletEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, &roomv1.WalletEntry{
			EntryId: e.EntryID, Kind: string(e.Kind), Amount: e.Amount, BalanceAfter: e.BalanceAfter, Key: e.Key,
			CreatedAtMs: e.CreatedAt.UnixMilli(),
		})
	}
	if len(entries) == size {
		out.NextPageToken = pageToken(kind, entries[len(entries)-1].EntryID, "")
	}
	return connect.NewResponse(out), nil
}
