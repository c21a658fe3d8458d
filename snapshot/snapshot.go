// Package snapshot converts room state to and from roomv1.RoomSnapshot, the
// one message used both as the stored snapshot payload and as the query
// answer. Encoding is deterministic: equal states give equal bytes.
package snapshot

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
)

var statusToProto = map[room.Status]roomv1.RoomStatus{
	room.StatusCreating: roomv1.RoomStatus_ROOM_STATUS_CREATING,
	room.StatusOpen:     roomv1.RoomStatus_ROOM_STATUS_OPEN,
	room.StatusClosed:   roomv1.RoomStatus_ROOM_STATUS_CLOSED,
}

// StatusToProto maps a domain status to the API enum.
func StatusToProto(s room.Status) roomv1.RoomStatus { return statusToProto[s] }

// StatusFromProto maps the API enum to a domain status; ok is false for
// unspecified or unknown values.
func StatusFromProto(s roomv1.RoomStatus) (room.Status, bool) {
	for k, v := range statusToProto {
		if v == s {
			return k, true
		}
	}
	return "", false
}

// ToProto builds the snapshot message of s. Lists are sorted by user id,
// except the ranks, which are in rank order (value descending, then user id).
func ToProto(s *room.State) *roomv1.RoomSnapshot {
	return toProto(s, memberList(s), contributionList(s.Economy.Contrib))
}

// memberList makes the member messages of s in user id order.
func memberList(s *room.State) []*roomv1.Member {
	ids := s.SortedMemberIDs()
	members := make([]*roomv1.Member, len(ids))
	for i, id := range ids {
		members[i] = memberToProto(s.Members[id])
	}
	return members
}

// toProto builds the snapshot message of s with members, s's members in
// the order of their user ids.
func toProto(s *room.State, members []*roomv1.Member, contributions []*roomv1.RankEntry) *roomv1.RoomSnapshot {
	p := &roomv1.RoomSnapshot{
		RoomId:          s.RoomID,
		RoomVersion:     s.Version,
		Status:          StatusToProto(s.Status),
		OwnerUserId:     s.OwnerUserID,
		HostUserId:      s.HostUserID,
		Mode:            s.Mode,
		Region:          s.Region,
		CreatedAtMs:     s.CreatedAt,
		AdminUserIds:    s.SortedAdminIDs(),
		OnlineCount:     int32(len(s.Members)),
		LastCommandAtMs: s.LastAt,
		Profile: &roomv1.RoomProfile{
			Title:         s.Profile.Title,
			Notice:        s.Profile.Notice,
			CoverUrl:      s.Profile.CoverURL,
			BackgroundUrl: s.Profile.Background,
			ChatEnabled:   s.Profile.ChatEnabled,
		},
	}
	p.Members = members
	p.Seats = make([]*roomv1.MicSeat, len(s.Seats))
	for i, seat := range s.Seats {
		p.Seats[i] = &roomv1.MicSeat{
			Index: int32(i), UserId: seat.UserID, Locked: seat.Locked, MutedByAdmin: seat.MutedByAdmin,
			MicOn: seat.MicOn, OccupiedSinceMs: seat.OccupiedSince, Charm: seat.Charm,
		}
	}
	p.ChatMutes = restrictions(s.Mutes, s.MuteReasons)
	p.Bans = restrictions(s.Bans, s.BanReasons)
	p.Economy = economyToProto(s, contributions)
	p.MicApprovalRequired = s.MicApproval
	p.MicRequests = micQueueToProto(s.MicRequests)
	p.MicInvites = micQueueToProto(s.MicInvites)
	return p
}

func memberToProto(m *room.Member) *roomv1.Member {
	return &roomv1.Member{
		UserId: m.UserID, JoinedAtMs: m.JoinedAt, Nickname: m.Nickname,
		AvatarUrl: m.AvatarURL, Vehicle: m.Vehicle, EntryEffect: m.EntryEffect,
	}
}

// sameMember reports whether p is the message of m.
func sameMember(p *roomv1.Member, m *room.Member) bool {
	return p.GetUserId() == m.UserID && p.GetJoinedAtMs() == m.JoinedAt && p.GetNickname() == m.Nickname &&
		p.GetAvatarUrl() == m.AvatarURL && p.GetVehicle() == m.Vehicle && p.GetEntryEffect() == m.EntryEffect
}

// Builder builds the snapshot messages of one room's successive states,
// as ToProto does, reusing what its last build made: the messages of the
// members that did not change, and the members' order, and so for the
// day's contributions. A room of tens of thousands of members (or of the
// day's senders) then costs a pass over them instead of a sort and a
// message each (50,000 members: a sort of 4 ms and 50,000 allocations;
// 20,000 senders: 2.5 ms, paid at each read's build in a gift storm). A
// list of fewer than builderKeeps entries is built as ToProto builds it
// and nothing is kept: it costs little, and every loaded room would
// otherwise hold its members' messages.
// The zero Builder is ready; it is not safe for concurrent use. Its
// messages share member messages with each other: none may be modified.
type Builder struct {
	ids  []int64          // the member ids of the last build, ascending
	msgs []*roomv1.Member // their messages, in the same order
	last *room.State      // the State of the last build that kept its members
	// The day's contributions of the last build that kept them, in
	// ascending user id order, with their ids.
	senders []int64
	contrib []*roomv1.RankEntry
}

// Reset forgets what b kept. Call it when the State b builds from is
// replaced (a room reloaded), so that b does not keep the old one.
func (b *Builder) Reset() { *b = Builder{} }

// Reuse returns ToProto(s) for a caller that knows no member of s changed
// (joined, joined again with new fields, left) since b's last build of s: it
// takes that build's member list as it is, with no pass over the crowd (the
// lists are never modified). A gift storm's commands change no member. It
// builds as ToProto does when b's last build was not of s.
func (b *Builder) Reuse(s *room.State) *roomv1.RoomSnapshot {
	if b.last != s || len(b.ids) != len(s.Members) {
		return b.ToProto(s)
	}
	return toProto(s, b.msgs, b.contributions(s.Economy.Contrib))
}

// builderKeeps is the fewest members whose messages a Builder keeps.
var builderKeeps = 1000

// ToProto returns ToProto(s).
func (b *Builder) ToProto(s *room.State) *roomv1.RoomSnapshot {
	return toProto(s, b.members(s), b.contributions(s.Economy.Contrib))
}

// members returns the member messages of s in user id order.
func (b *Builder) members(s *room.State) []*roomv1.Member {
	if len(s.Members) < builderKeeps {
		b.ids, b.msgs, b.last = nil, nil, nil
		return memberList(s)
	}
	// The last build's members still in the room keep their order and,
	// unchanged, their messages; the new ones are sorted and merged in.
	ids := make([]int64, 0, len(s.Members))
	msgs := make([]*roomv1.Member, 0, len(s.Members))
	for i, id := range b.ids {
		m, ok := s.Members[id]
		if !ok {
			continue
		}
		p := b.msgs[i]
		if !sameMember(p, m) {
			p = memberToProto(m)
		}
		ids, msgs = append(ids, id), append(msgs, p)
	}
	if len(ids) < len(s.Members) {
		var fresh []int64
		for id := range s.Members {
			if _, found := slices.BinarySearch(ids, id); !found {
				fresh = append(fresh, id)
			}
		}
		slices.Sort(fresh)
		ids, msgs = merge(ids, msgs, fresh, func(id int64) *roomv1.Member { return memberToProto(s.Members[id]) })
	}
	b.ids, b.msgs, b.last = ids, msgs, s
	return msgs
}

// contributions returns the entries of the day's contributions in user id
// order, as members does for the members: the last build's senders keep
// their order and, with the same total, their entries; new senders are
// sorted and merged in.
func (b *Builder) contributions(contrib map[int64]int64) []*roomv1.RankEntry {
	if len(contrib) < builderKeeps {
		b.senders, b.contrib = nil, nil
		return contributionList(contrib)
	}
	ids := make([]int64, 0, len(contrib))
	entries := make([]*roomv1.RankEntry, 0, len(contrib))
	for i, id := range b.senders {
		v, ok := contrib[id]
		if !ok {
			continue
		}
		e := b.contrib[i]
		if e.GetValue() != v {
			e = &roomv1.RankEntry{UserId: id, Value: v}
		}
		ids, entries = append(ids, id), append(entries, e)
	}
	if len(ids) < len(contrib) {
		var fresh []int64
		for id := range contrib {
			if _, found := slices.BinarySearch(ids, id); !found {
				fresh = append(fresh, id)
			}
		}
		slices.Sort(fresh)
		ids, entries = merge(ids, entries, fresh, func(id int64) *roomv1.RankEntry { return &roomv1.RankEntry{UserId: id, Value: contrib[id]} })
	}
	b.senders, b.contrib = ids, entries
	return entries
}

// merge merges the ascending ids and their messages with the ascending
// fresh ids, none of them in ids, and their new messages, made by fresh.
func merge[M any](ids []int64, msgs []M, freshIDs []int64, fresh func(id int64) M) ([]int64, []M) {
	outIDs := make([]int64, 0, len(ids)+len(freshIDs))
	out := make([]M, 0, len(ids)+len(freshIDs))
	for len(ids) > 0 || len(freshIDs) > 0 {
		if len(freshIDs) == 0 || len(ids) > 0 && ids[0] < freshIDs[0] {
			outIDs, out = append(outIDs, ids[0]), append(out, msgs[0])
			ids, msgs = ids[1:], msgs[1:]
			continue
		}
		outIDs, out = append(outIDs, freshIDs[0]), append(out, fresh(freshIDs[0]))
		freshIDs = freshIDs[1:]
	}
	return outIDs, out
}

func micQueueToProto(m map[int64]*room.MicEntry) []*roomv1.MicQueueEntry {
	entries := room.SortedMicEntries(m)
	out := make([]*roomv1.MicQueueEntry, len(entries))
	for i, e := range entries {
		out[i] = &roomv1.MicQueueEntry{UserId: e.UserID, SeatIndex: e.SeatIndex, ByUserId: e.By, AtMs: e.At, ExpiresAtMs: e.ExpiresAt}
	}
	return out
}

// micQueueFromProto rebuilds a mic queue; a user listed twice, or more
// entries than the bound, is corruption.
func micQueueFromProto(roomID, what string, entries []*roomv1.MicQueueEntry, bound int) (map[int64]*room.MicEntry, error) {
	if len(entries) > bound {
		return nil, fmt.Errorf("snapshot room=%s: %d mic %s", roomID, len(entries), what)
	}
	m := make(map[int64]*room.MicEntry, len(entries))
	for _, e := range entries {
		if _, dup := m[e.GetUserId()]; dup {
			return nil, fmt.Errorf("snapshot room=%s: user %d appears twice in mic %s", roomID, e.GetUserId(), what)
		}
		m[e.GetUserId()] = &room.MicEntry{
			UserID: e.GetUserId(), SeatIndex: e.GetSeatIndex(), By: e.GetByUserId(), At: e.GetAtMs(), ExpiresAt: e.GetExpiresAtMs(),
		}
	}
	return m, nil
}

// contributionList makes the day's contributions in user id order.
func contributionList(contrib map[int64]int64) []*roomv1.RankEntry {
	ids := room.SortedIDs(contrib)
	out := make([]*roomv1.RankEntry, len(ids))
	for i, id := range ids {
		out[i] = &roomv1.RankEntry{UserId: id, Value: contrib[id]}
	}
	return out
}

func economyToProto(s *room.State, contributions []*roomv1.RankEntry) *roomv1.RoomEconomy {
	e, rk := &s.Economy, &s.Economy.Rocket
	launches := make([]*roomv1.RocketLaunch, len(rk.Launches))
	for i, l := range rk.Launches {
		launches[i] = &roomv1.RocketLaunch{
			RocketId: l.RocketID, Level: l.Level, IgnitedAtMs: l.IgnitedAt, LaunchAtMs: l.LaunchAt,
			BusinessDay: l.Day, TopContributors: rankToProto(l.Top),
		}
	}
	return &roomv1.RoomEconomy{
		BusinessDay: e.Day, DayShift: e.DayShift, Heat: e.Heat, Rank: rankToProto(e.Top), Contributions: contributions,
		Rocket: &roomv1.RoomRocket{
			Level: rk.Level, Fuel: rk.Fuel, Threshold: s.RocketThreshold(), Ignitions: rk.Ignitions,
			Contributors: rankToProto(room.RankOf(rk.Contributors)), Launches: launches,
		},
		Rules: RulesToProto(s.EffectiveRules()),
	}
}

// RulesToProto returns the snapshot form of r.
func RulesToProto(r *room.Rules) *roomv1.EconomyRules {
	spec := r.Spec()
	p := &roomv1.EconomyRules{
		TimeZone: spec.TimeZone, DayStartMs: spec.DayStartMs, RankSize: int32(spec.RankSize),
		RocketLevels: make([]*roomv1.RocketLevelRule, len(spec.RocketLevels)), Digest: r.Digest(),
	}
	for i, l := range spec.RocketLevels {
		p.RocketLevels[i] = &roomv1.RocketLevelRule{Fuel: l.Fuel, CountdownMs: l.CountdownMs}
	}
	return p
}

// rulesFromProto rebuilds recorded rules; nil (a snapshot stored before
// rules were recorded) gives nil, the built-in defaults.
func rulesFromProto(p *roomv1.EconomyRules, roomID string) (*room.Rules, error) {
	if p == nil {
		return nil, nil
	}
	spec := room.RulesSpec{TimeZone: p.GetTimeZone(), DayStartMs: p.GetDayStartMs(), RankSize: int(p.GetRankSize())}
	for _, l := range p.GetRocketLevels() {
		spec.RocketLevels = append(spec.RocketLevels, room.LevelSpec{Fuel: l.GetFuel(), CountdownMs: l.GetCountdownMs()})
	}
	r, err := spec.Rules()
	if err != nil {
		return nil, fmt.Errorf("snapshot room=%s: %w", roomID, err)
	}
	return r, nil
}

func rankToProto(r []room.RankEntry) []*roomv1.RankEntry {
	out := make([]*roomv1.RankEntry, len(r))
	for i, e := range r {
		out[i] = &roomv1.RankEntry{UserId: e.UserID, Value: e.Value}
	}
	return out
}

func rankFromProto(r []*roomv1.RankEntry) []room.RankEntry {
	if len(r) == 0 {
		return nil
	}
	out := make([]room.RankEntry, len(r))
	for i, e := range r {
		out[i] = room.RankEntry{UserID: e.GetUserId(), Value: e.GetValue()}
	}
	return out
}

// valueMap rebuilds a user-keyed value map from its entries; a user listed
// twice is corruption.
func valueMap(roomID, what string, entries []*roomv1.RankEntry) (map[int64]int64, error) {
	m := make(map[int64]int64, len(entries))
	for _, e := range entries {
		if _, dup := m[e.GetUserId()]; dup {
			return nil, fmt.Errorf("snapshot room=%s: user %d appears twice in %s", roomID, e.GetUserId(), what)
		}
		m[e.GetUserId()] = e.GetValue()
	}
	return m, nil
}

// economyFromProto rebuilds the economy under the rules the snapshot
// records; the visible rank is derived from the contributions.
func economyFromProto(s *room.State, p *roomv1.RoomEconomy, roomID string) error {
	contrib, err := valueMap(roomID, "contributions", p.GetContributions())
	if err != nil {
		return err
	}
	rp := p.GetRocket()
	contributors, err := valueMap(roomID, "rocket contributors", rp.GetContributors())
	if err != nil {
		return err
	}
	if n := len(rp.GetLaunches()); n > room.MaxRocketLaunches {
		return fmt.Errorf("snapshot room=%s: %d rocket launches", roomID, n)
	}
	var launches []room.RocketLaunch
	for _, l := range rp.GetLaunches() {
		launches = append(launches, room.RocketLaunch{
			RocketID: l.GetRocketId(), Level: l.GetLevel(), IgnitedAt: l.GetIgnitedAtMs(), LaunchAt: l.GetLaunchAtMs(),
			Day: l.GetBusinessDay(), Top: rankFromProto(l.GetTopContributors()),
		})
	}
	s.Economy = room.Economy{
		Day: p.GetBusinessDay(), DayShift: p.GetDayShift(), Heat: p.GetHeat(), Contrib: contrib,
		Rocket: room.Rocket{
			Level: rp.GetLevel(), Fuel: rp.GetFuel(), Ignitions: rp.GetIgnitions(),
			Contributors: contributors, Launches: launches,
		},
	}
	rules, err := rulesFromProto(p.GetRules(), roomID)
	if err != nil {
		return err
	}
	s.SetRules(rules)
	return nil
}

func restrictions(m map[int64]int64, reasons map[int64]string) []*roomv1.Restriction {
	out := make([]*roomv1.Restriction, 0, len(m))
	for _, id := range room.SortedIDs(m) {
		out = append(out, &roomv1.Restriction{UserId: id, UntilMs: m[id], Permanent: m[id] == 0, Reason: reasons[id]})
	}
	return out
}

// FromProto rebuilds state from a snapshot message, under the economy rules
// it records. It checks what a stored snapshot must satisfy and reports
// corruption as an error.
func FromProto(p *roomv1.RoomSnapshot) (*room.State, error) {
	status, ok := StatusFromProto(p.GetStatus())
	if !ok {
		return nil, fmt.Errorf("snapshot room=%s: unknown status %v", p.GetRoomId(), p.GetStatus())
	}
	if n := len(p.GetSeats()); n > room.MaxSeats {
		return nil, fmt.Errorf("snapshot room=%s: %d seats", p.GetRoomId(), n)
	}
	s := room.NewEmpty()
	s.RoomID, s.Version, s.Status = p.GetRoomId(), p.GetRoomVersion(), status
	s.OwnerUserID, s.HostUserID, s.Mode, s.Region, s.CreatedAt = p.GetOwnerUserId(), p.GetHostUserId(), p.GetMode(), p.GetRegion(), p.GetCreatedAtMs()
	s.LastAt = p.GetLastCommandAtMs()
	pr := p.GetProfile()
	s.Profile = room.Profile{
		Title: pr.GetTitle(), Notice: pr.GetNotice(), CoverURL: pr.GetCoverUrl(),
		Background: pr.GetBackgroundUrl(), ChatEnabled: pr.GetChatEnabled(),
	}
	for _, id := range p.GetAdminUserIds() {
		s.Admins[id] = struct{}{}
	}
	for _, m := range p.GetMembers() {
		s.Members[m.GetUserId()] = &room.Member{
			UserID: m.GetUserId(), JoinedAt: m.GetJoinedAtMs(), Nickname: m.GetNickname(),
			AvatarURL: m.GetAvatarUrl(), Vehicle: m.GetVehicle(), EntryEffect: m.GetEntryEffect(),
		}
	}
	s.Seats = make([]room.Seat, len(p.GetSeats()))
	for i, seat := range p.GetSeats() {
		if seat.GetIndex() != int32(i) {
			return nil, fmt.Errorf("snapshot room=%s: seat %d has index %d", p.GetRoomId(), i, seat.GetIndex())
		}
		s.Seats[i] = room.Seat{
			UserID: seat.GetUserId(), Locked: seat.GetLocked(), MutedByAdmin: seat.GetMutedByAdmin(),
			MicOn: seat.GetMicOn(), OccupiedSince: seat.GetOccupiedSinceMs(), Charm: seat.GetCharm(),
		}
	}
	for _, r := range p.GetChatMutes() {
		s.Mutes[r.GetUserId()] = r.GetUntilMs()
		if r.GetReason() != "" {
			s.MuteReasons[r.GetUserId()] = r.GetReason()
		}
	}
	for _, r := range p.GetBans() {
		s.Bans[r.GetUserId()] = r.GetUntilMs()
		if r.GetReason() != "" {
			s.BanReasons[r.GetUserId()] = r.GetReason()
		}
	}
	s.MicApproval = p.GetMicApprovalRequired()
	var err error
	if s.MicRequests, err = micQueueFromProto(p.GetRoomId(), "requests", p.GetMicRequests(), room.MaxMicRequests); err != nil {
		return nil, err
	}
	if s.MicInvites, err = micQueueFromProto(p.GetRoomId(), "invitations", p.GetMicInvites(), room.MaxMicInvites); err != nil {
		return nil, err
	}
	// A snapshot of an older build may list restrictions that had ended by
	// its last command: they stay until the next command removes them.
	s.DeriveExpiry()
	if err := economyFromProto(s, p.GetEconomy(), p.GetRoomId()); err != nil {
		return nil, err
	}
	return s, nil
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// Encode returns the deterministic protobuf encoding of s.
func Encode(s *room.State) ([]byte, error) { return Marshal(ToProto(s)) }

// Marshal returns the deterministic protobuf encoding of p, a message
// ToProto built: what Encode returns for its state.
func Marshal(p *roomv1.RoomSnapshot) ([]byte, error) {
	b, err := deterministic.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot room=%s: %w", p.GetRoomId(), err)
	}
	return b, nil
}

// Decode rebuilds state from a stored snapshot payload.
func Decode(payload []byte) (*room.State, error) {
	var p roomv1.RoomSnapshot
	if err := proto.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	return FromProto(&p)
}

// WithMemberLimit returns p as a query answers it: at most limit members
// (0: all) and the economy without the full contribution list (a query
// shows only the visible rank). It never modifies p, which may be shared;
// the result shares p's other sub-messages.
func WithMemberLimit(p *roomv1.RoomSnapshot, limit int) *roomv1.RoomSnapshot {
	members := p.GetMembers()
	if limit > 0 && len(members) > limit {
		members = members[:limit]
	}
	e := p.GetEconomy()
	if len(members) == len(p.GetMembers()) && len(e.GetContributions()) == 0 {
		return p
	}
	if e != nil {
		e = &roomv1.RoomEconomy{BusinessDay: e.BusinessDay, DayShift: e.DayShift, Heat: e.Heat, Rank: e.Rank, Rocket: e.Rocket, Rules: e.Rules}
	}
	return &roomv1.RoomSnapshot{
		RoomId: p.RoomId, RoomVersion: p.RoomVersion, Status: p.Status, OwnerUserId: p.OwnerUserId,
		HostUserId: p.HostUserId, Mode: p.Mode, Region: p.Region, CreatedAtMs: p.CreatedAtMs, Profile: p.Profile,
		AdminUserIds: p.AdminUserIds, Members: members, Seats: p.Seats, ChatMutes: p.ChatMutes,
		Bans: p.Bans, OnlineCount: p.OnlineCount, LastCommandAtMs: p.LastCommandAtMs, Economy: e,
		MicApprovalRequired: p.MicApprovalRequired, MicRequests: p.MicRequests, MicInvites: p.MicInvites,
	}
}

// WithoutEnded returns p as a query at time at (unix ms) answers it: without
// the bans and chat mutes that have ended by then (permanent bans never
// do). The room keeps them until its next command, and the stored snapshot
// too; a client that holds the room's version already applies the same rule
// to the until_ms it holds, so not_modified stays true. It never modifies
// p, which may be shared; the result shares p's other sub-messages.
func WithoutEnded(p *roomv1.RoomSnapshot, at int64) *roomv1.RoomSnapshot {
	mutes, bans := current(p.GetChatMutes(), at), current(p.GetBans(), at)
	if len(mutes) == len(p.GetChatMutes()) && len(bans) == len(p.GetBans()) {
		return p
	}
	return &roomv1.RoomSnapshot{
		RoomId: p.RoomId, RoomVersion: p.RoomVersion, Status: p.Status, OwnerUserId: p.OwnerUserId,
		HostUserId: p.HostUserId, Mode: p.Mode, Region: p.Region, CreatedAtMs: p.CreatedAtMs, Profile: p.Profile,
		AdminUserIds: p.AdminUserIds, Members: p.Members, Seats: p.Seats, ChatMutes: mutes,
		Bans: bans, OnlineCount: p.OnlineCount, LastCommandAtMs: p.LastCommandAtMs, Economy: p.Economy,
		MicApprovalRequired: p.MicApprovalRequired, MicRequests: p.MicRequests, MicInvites: p.MicInvites,
	}
}

// current returns the restrictions that have not ended at time at; rs itself
// when none has.
func current(rs []*roomv1.Restriction, at int64) []*roomv1.Restriction {
	ended := func(r *roomv1.Restriction) bool { return r.GetUntilMs() != 0 && r.GetUntilMs() <= at }
	if !slices.ContainsFunc(rs, ended) {
		return rs
	}
	return slices.DeleteFunc(slices.Clone(rs), ended)
}
