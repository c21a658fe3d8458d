package cell

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"hyapp/room-service/room"
)

// Presence: members who disconnect without LeaveRoom.
//
// The owner node keeps, for each loaded room, when each member was last
// seen: a heartbeat from the gateway (Registry.Heartbeat), a Tencent IM
// login (Registry.UserOnline) or a command of the member's own (JoinRoom,
// TakeMic, SendGift, …) counts. A logout or disconnect (Registry.UserOffline)
// marks the member offline at once. Presence lives in memory only, on the
// room's owner: a room loaded by recovery or a hand-off treats every member
// as seen at the load.
//
// Decisions, on the registry's clock:
//   - a member not seen for Config.PresenceTimeout leaves the room;
//   - a seated member offline (logged out or disconnected, or silent for a
//     third of the presence timeout) for Config.MicOfflineGrace loses the
//     seat and stays in the room; one seen again within the grace keeps it.
//
// One timer per room fires at the earliest of these deadlines (rounded up
// to a whole second, so that members due together go together). Its wakeup
// submits room.ExpirePresence commands, up to room.MaxPresenceExpiries users
// each, through the registry like any command. Before such a command
// applies, the room's goroutine checks every listed user again against the
// command's time (Prepare): a member seen since is dropped from the list,
// and a command left with nobody is refused (no_change) and not logged.
// Apply then checks membership and seats against the state, so replay
// removes the same users at the same version.
//
// presence is the feature that does this; it keeps the rooms' members from
// their load (Loaded) and the committed events (Committed): RoomUserJoined
// adds a member, RoomUserLeft, RoomUserKicked and RoomClosed remove them,
// and a batch that changed a seat brings the seat list.
type presence struct {
	reg     *Registry
	timeout int64 // ms
	grace   int64 // ms
	silent  int64 // ms without a sign of life after which a seated member counts as offline

	mu    sync.Mutex
	rooms map[string]*roomPresence             // the rooms loaded on this node
	users map[int64]map[*roomPresence]struct{} // the loaded rooms each user is a member of
}

// roomPresence is one loaded room's presence. Its mutex guards it: the
// room's goroutine, heartbeats, callbacks and the timer all reach it.
// Lock order: presence.mu before roomPresence.mu.
type roomPresence struct {
	p      *presence
	roomID string

	mu      sync.Mutex
	stopped bool
	members map[int64]*seen
	seated  map[int64]int32 // seated members and their seat
	timer   *time.Timer
	dueAt   int64 // unix ms the timer fires at; 0: not armed
	running bool  // a wakeup is submitting expiries
}

// seen is what the owner knows of one member's presence.
type seen struct {
	last    int64 // unix ms the member was last seen
	offline int64 // unix ms they went offline; 0: online
	event   int64 // EventTime of the last state callback applied, to drop late ones
}

const (
	// presenceMinGap is the least time between two wakeups of a room, so a
	// member that cannot be expired (a busy room, storage down) is retried,
	// not spun on.
	presenceMinGap = time.Second
)

func newPresence(reg *Registry) *presence {
	return &presence{
		reg: reg, timeout: reg.cfg.PresenceTimeout.Milliseconds(), grace: reg.cfg.MicOfflineGrace.Milliseconds(),
		silent: reg.cfg.PresenceTimeout.Milliseconds() / 3,
		rooms:  make(map[string]*roomPresence), users: make(map[int64]map[*roomPresence]struct{}),
	}
}

func (p *presence) feature() Feature {
	return Feature{
		Runs: []room.CommandType{room.CmdExpirePresence}, Prepare: p.prepare,
		Loaded: p.loaded, Committed: p.committed, Stopped: p.stopped,
		Contribute: p.contribute, TimerKind: TimerKindPresence, Fire: p.fire, // sweep.go
	}
}

func (p *presence) now() int64 { return p.reg.cfg.Clock().UnixMilli() }

func (p *presence) room(roomID string) *roomPresence {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rooms[roomID]
}

// indexLocked adds (or removes) the user's membership of rp in the user
// index. p.mu is held.
func (p *presence) indexLocked(user int64, rp *roomPresence, member bool) {
	rooms := p.users[user]
	if member {
		if rooms == nil {
			rooms = make(map[*roomPresence]struct{}, 1)
			p.users[user] = rooms
		}
		rooms[rp] = struct{}{}
		return
	}
	delete(rooms, rp)
	if len(rooms) == 0 {
		delete(p.users, user)
	}
}

// loaded starts the room's presence: every member is seen now (after a
// restart or a hand-off nobody knows better). A reload of a room still
// loaded keeps what it knew of the members that remain.
func (p *presence) loaded(s *room.State) {
	now := p.now()
	p.mu.Lock()
	rp := p.rooms[s.RoomID]
	if rp == nil {
		rp = &roomPresence{p: p, roomID: s.RoomID, members: make(map[int64]*seen, len(s.Members))}
		p.rooms[s.RoomID] = rp
	}
	rp.mu.Lock()
	for u := range rp.members {
		if !s.IsMember(u) {
			delete(rp.members, u)
			p.indexLocked(u, rp, false)
		}
	}
	for u := range s.Members {
		if rp.members[u] == nil {
			rp.members[u] = &seen{last: now}
			p.indexLocked(u, rp, true)
		}
	}
	p.mu.Unlock()
	rp.seated = seatedOf(s.Seats)
	rp.dueAt = 0
	rp.scheduleLocked(now)
	rp.mu.Unlock()
	if len(s.Members) > 0 {
		p.setSweep(s.RoomID)
	}
}

func seatedOf(seats []room.Seat) map[int64]int32 {
	out := make(map[int64]int32)
	for i, seat := range seats {
		if seat.UserID != 0 {
			out[seat.UserID] = int32(i)
		}
	}
	return out
}

// stopped forgets the room's presence.
func (p *presence) stopped(roomID string) {
	p.mu.Lock()
	rp := p.rooms[roomID]
	delete(p.rooms, roomID)
	if rp != nil {
		rp.mu.Lock()
		for u := range rp.members {
			p.indexLocked(u, rp, false)
		}
		rp.stopped = true
		if rp.timer != nil {
			rp.timer.Stop()
		}
		rp.mu.Unlock()
	}
	p.mu.Unlock()
}

// committed follows the room's members and seats, and counts each
// member's own command as a sign of life.
func (p *presence) committed(batch []room.Committed) {
	if len(batch) == 0 {
		return
	}
	rp := p.room(batch[0].RoomID)
	if rp == nil {
		return
	}
	var joined, gone, touched []int64
	rp.mu.Lock()
	for _, c := range batch {
		for _, ev := range c.Events {
			switch d := ev.Data.(type) {
			case *room.RoomUserJoinedEvent:
				if rp.members[d.UserID] == nil {
					rp.members[d.UserID] = &seen{last: c.At}
					joined = append(joined, d.UserID)
				}
			case *room.RoomUserLeftEvent:
				gone = rp.removeLocked(d.UserID, gone)
			case *room.RoomUserKickedEvent:
				gone = rp.removeLocked(d.UserID, gone)
			case *room.RoomClosedEvent:
				for u := range rp.members {
					gone = rp.removeLocked(u, gone)
				}
			}
		}
		if c.Seats != nil {
			rp.seated = seatedOf(c.Seats)
			for u := range rp.seated {
				touched = append(touched, u)
			}
		}
		if c.Operator != room.SystemOperator {
			rp.seeLocked(c.Operator, c.At)
			touched = append(touched, c.Operator)
		}
	}
	rp.scheduleTouchedLocked(p.now(), append(touched, joined...))
	rp.mu.Unlock()
	if len(joined)+len(gone) > 0 {
		// Each user's index follows where the batch left them: one who
		// left and joined again within it is a member.
		p.mu.Lock()
		rp.mu.Lock()
		for _, u := range slices.Concat(joined, gone) {
			p.indexLocked(u, rp, rp.members[u] != nil)
		}
		rp.mu.Unlock()
		p.mu.Unlock()
	}
}

func (rp *roomPresence) removeLocked(user int64, gone []int64) []int64 {
	if rp.members[user] == nil {
		return gone
	}
	delete(rp.members, user)
	delete(rp.seated, user)
	return append(gone, user)
}

// seeLocked marks a member seen (and online) at at; it reports whether
// the user is a member.
func (rp *roomPresence) seeLocked(user, at int64) bool {
	m := rp.members[user]
	if m == nil {
		return false
	}
	m.last, m.offline = max(m.last, at), 0
	return true
}

// leaveAt is when a member leaves the room if not seen again.
func (rp *roomPresence) leaveAt(m *seen) int64 { return m.last + rp.p.timeout }

// unseatAt is when a seated member loses the seat if not seen again: the
// grace after they went offline, or after they fell silent.
func (rp *roomPresence) unseatAt(m *seen) int64 {
	off := m.last + rp.p.silent
	if m.offline != 0 {
		off = min(off, m.offline)
	}
	return off + rp.p.grace
}

// dueLocked is the earliest deadline of the room's members, 0 for none.
func (rp *roomPresence) dueLocked() int64 {
	due := int64(0)
	for u, m := range rp.members {
		due = earlier(due, rp.deadline(u, m))
	}
	return due
}

// deadline is the member's next deadline: leaving, or losing the seat.
func (rp *roomPresence) deadline(u int64, m *seen) int64 {
	d := rp.leaveAt(m)
	if _, ok := rp.seated[u]; ok {
		d = min(d, rp.unseatAt(m))
	}
	return d
}

// earlier is the earlier of two deadlines, 0 meaning none.
func earlier(a, b int64) int64 {
	if a == 0 || b < a {
		return b
	}
	return a
}

// scheduleLocked arms the timer for the earliest deadline, rounded up to
// a whole second, unless it is armed earlier already or a wakeup runs
// (it schedules when it ends).
func (rp *roomPresence) scheduleLocked(now int64) { rp.scheduleNotBefore(now, 0) }

// scheduleNotBefore is scheduleLocked with the timer held back until
// notBefore (unix ms).
func (rp *roomPresence) scheduleNotBefore(now, notBefore int64) {
	if rp.stopped || rp.running {
		return
	}
	rp.armLocked(now, rp.dueLocked(), notBefore)
}

// scheduleTouchedLocked is scheduleLocked after a commit or a state
// callback that moved only the deadlines of users (joined, seen, seated,
// gone offline): no deadline moves earlier otherwise, so while the timer
// is armed only theirs can make it earlier, and a room of tens of
// thousands of listeners is not walked on every commit or callback.
func (rp *roomPresence) scheduleTouchedLocked(now int64, users []int64) {
	if rp.dueAt == 0 {
		rp.scheduleLocked(now)
		return
	}
	if rp.stopped || rp.running {
		return
	}
	due := int64(0)
	for _, u := range users {
		if m := rp.members[u]; m != nil {
			due = earlier(due, rp.deadline(u, m))
		}
	}
	rp.armLocked(now, due, 0)
}

// armLocked arms the timer for due (unix ms, 0 for none) rounded up to a
// whole second and not before notBefore, unless it is armed earlier.
func (rp *roomPresence) armLocked(now, due, notBefore int64) {
	if due == 0 {
		return
	}
	due = max((due+999)/1000*1000, notBefore)
	if rp.dueAt != 0 && rp.dueAt <= due {
		return
	}
	rp.dueAt = due
	d := time.Duration(max(due-now, 0)) * time.Millisecond
	if rp.timer == nil {
		rp.timer = time.AfterFunc(d, rp.fire)
	} else {
		rp.timer.Reset(d)
	}
}

// fire starts a wakeup unless one runs.
func (rp *roomPresence) fire() {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.stopped || rp.running {
		return
	}
	rp.running, rp.dueAt = true, 0
	rp.p.reg.wakes.spawn(func(ctx context.Context) { rp.wake(ctx) })
}

// wake submits the expiries due now and schedules the next wakeup; it
// returns the commands it submitted and how many committed.
func (rp *roomPresence) wake(ctx context.Context) (submitted, committed int) {
	now := rp.p.now()
	rp.mu.Lock()
	cmds := rp.dueCommandsLocked(now)
	rp.mu.Unlock()
	for _, cmd := range cmds {
		ok, err := rp.p.submit(ctx, rp.roomID, cmd)
		submitted++
		if ok {
			committed++
		}
		if err != nil {
			rp.p.reg.log.Warn("presence expiry failed; retried at the next wakeup", "room_id", rp.roomID, "err", err)
			break
		}
	}
	rp.mu.Lock()
	rp.running, rp.dueAt = false, 0
	rp.scheduleNotBefore(rp.p.now(), now+presenceMinGap.Milliseconds())
	rp.mu.Unlock()
	return submitted, committed
}

// dueCommandsLocked returns the expiries due at now, in commands of at
// most room.MaxPresenceExpiries users.
func (rp *roomPresence) dueCommandsLocked(now int64) []*room.ExpirePresence {
	var out []*room.ExpirePresence
	cur := room.NewExpirePresence()
	add := func() {
		if len(cur.Leave)+len(cur.Unseat) == room.MaxPresenceExpiries {
			out = append(out, cur)
			cur = room.NewExpirePresence()
		}
	}
	for u, m := range rp.members {
		seat, seated := rp.seated[u]
		switch {
		case u <= 0 || u == room.SystemOperator:
			// Not a user (a log from before room.Envelope.CheckOrigin may
			// hold one as a member): the domain refuses an expiry that
			// names it, which would keep everyone listed with it in.
		case rp.leaveAt(m) <= now:
			cur.Leave = append(cur.Leave, u)
			add()
		case seated && rp.unseatAt(m) <= now:
			cur.Unseat = append(cur.Unseat, room.SeatExpiry{UserID: u, SeatIndex: seat})
			add()
		}
	}
	if len(cur.Leave)+len(cur.Unseat) > 0 {
		out = append(out, cur)
	}
	return out
}

// submit runs one expiry through the registry; ok reports that it
// committed. A refusal because nobody was left to expire is no error.
func (p *presence) submit(ctx context.Context, roomID string, cmd *room.ExpirePresence) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	_, err = p.reg.Submit(ctx, &room.Envelope{
		RoomID: roomID, CommandID: presenceCommandID(), Operator: room.SystemOperator, Platform: true, Command: cmd,
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, room.ErrNoChange), errors.Is(err, room.ErrRoomClosed):
		return false, nil
	}
	return false, err
}

// presenceCommandID is a fresh command id for an expiry: nothing retries
// one (the next wakeup decides anew), so it only needs to be unique.
func presenceCommandID() string { return room.PresenceIDPrefix + uniqueSuffix() }

// uniqueSuffix is 96 random bits in hex: an id part no other command has.
func uniqueSuffix() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// prepare checks each expiry again on the room's goroutine, at its
// command time: a listed member seen since, or gone, or sitting elsewhere,
// is dropped from it; an expiry left with nobody is refused (no_change).
func (p *presence) prepare(_ context.Context, s *room.State, run []*room.Envelope) []Verdict {
	out := make([]Verdict, len(run))
	rp := p.room(s.RoomID)
	if rp == nil {
		for i := range out {
			out[i].Err = room.ErrNoChange
		}
		return out
	}
	var gone []int64
	rp.mu.Lock()
	// What the state says wins over what the events told: no listed user
	// stays due for ever because the two disagree.
	rp.seated = seatedOf(s.Seats)
	for i, env := range run {
		cmd, ok := env.Command.(*room.ExpirePresence)
		if !ok {
			out[i].Err = room.ErrNoChange
			continue
		}
		leave := cmd.Leave[:0]
		for _, u := range cmd.Leave {
			m := rp.members[u]
			switch {
			case m != nil && !s.IsMember(u):
				gone = rp.removeLocked(u, gone)
			case m != nil && rp.leaveAt(m) <= env.At:
				leave = append(leave, u)
			}
		}
		unseat := cmd.Unseat[:0]
		for _, e := range cmd.Unseat {
			if m := rp.members[e.UserID]; m != nil && s.SeatOf(e.UserID) == int(e.SeatIndex) && rp.unseatAt(m) <= env.At {
				unseat = append(unseat, e)
			}
		}
		cmd.Leave, cmd.Unseat = leave, unseat
		if len(leave)+len(unseat) == 0 {
			out[i].Err = room.ErrNoChange
		}
	}
	rp.mu.Unlock()
	if len(gone) > 0 {
		p.mu.Lock()
		for _, u := range gone {
			p.indexLocked(u, rp, false)
		}
		p.mu.Unlock()
	}
	return out
}

// HeartbeatResult is the answer to a heartbeat.
type HeartbeatResult struct {
	// Members is how many listed users are members of the room: they are
	// seen now.
	Members int
	// NotMembers are the listed users who are not members (a heartbeat
	// never joins anyone), in the order given.
	NotMembers []int64
}

// Heartbeat marks the listed members of the room seen now, loading the
// room if need be; users who are not members are counted, not joined.
// It logs nothing and does not wait in the room's mailbox, but it keeps
// the room loaded (it counts as a use, and against the idle timeout).
// Errors: the room's id and the list are checked first (room.CheckHeartbeat);
// then those of loading the room (room_not_found, lease_held, …).
func (r *Registry) Heartbeat(ctx context.Context, roomID string, users []int64) (HeartbeatResult, error) {
	if err := room.CheckHeartbeat(roomID, users); err != nil {
		return HeartbeatResult{}, err
	}
	for range 3 {
		c, err := r.cell(ctx, roomID, false)
		if err != nil {
			return HeartbeatResult{}, err
		}
		if c.provisional.Load() {
			// A create started the room empty and has not found out yet
			// whether it has a row: its members are not known here.
			return HeartbeatResult{}, room.Errorf(room.ErrUnavailable, "room %s is loading; retry", roomID)
		}
		c.used.Store(r.uses.Add(1))
		c.touched.Store(time.Now().UnixNano())
		if err := c.lease.Check(ctx); err != nil {
			return HeartbeatResult{}, room.Errorf(room.ErrFenced, "room %s: %v", roomID, err)
		}
		if !c.lease.Fresh() {
			// The lease could not be renewed: another node may own the
			// room. A read through the mailbox checks the room's owner
			// epoch first (see handle) and stops the cell if it is not.
			if _, err := r.call(ctx, roomID, nil); err != nil {
				return HeartbeatResult{}, err
			}
		}
		if res, ok := r.builtin.presence.heartbeat(roomID, users); ok {
			return res, nil
		}
		// The room stopped between the lookup and the heartbeat: its successor.
	}
	return HeartbeatResult{}, room.Errorf(room.ErrUnavailable, "room %s is restarting; retry", roomID)
}

func (p *presence) heartbeat(roomID string, users []int64) (HeartbeatResult, bool) {
	rp := p.room(roomID)
	if rp == nil {
		return HeartbeatResult{}, false
	}
	now := p.now()
	var res HeartbeatResult
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.stopped {
		return res, false
	}
	for _, u := range users {
		if rp.seeLocked(u, now) {
			res.Members++
		} else {
			res.NotMembers = append(res.NotMembers, u)
		}
	}
	return res, true
}

// UserOnline marks the user seen now in every room loaded on this node
// they are a member of (a Tencent IM login). eventAt (unix ms, the
// callback's EventTime) orders the callbacks of one user: one older than
// the last applied is dropped.
func (r *Registry) UserOnline(user, eventAt int64) int {
	return r.builtin.presence.stateChange(user, eventAt, true)
}

// UserOffline marks the user offline now in every room loaded on this
// node they are a member of (a Tencent IM logout or disconnect): the
// presence timeout and, on a seat, the mic grace start now. A later sign
// of life brings them back. It returns the rooms it marked.
func (r *Registry) UserOffline(user, eventAt int64) int {
	return r.builtin.presence.stateChange(user, eventAt, false)
}

func (p *presence) stateChange(user, eventAt int64, online bool) int {
	p.mu.Lock()
	rooms := make([]*roomPresence, 0, len(p.users[user]))
	for rp := range p.users[user] {
		rooms = append(rooms, rp)
	}
	p.mu.Unlock()
	now, n := p.now(), 0
	for _, rp := range rooms {
		rp.mu.Lock()
		if m := rp.members[user]; m != nil && !rp.stopped && eventAt >= m.event {
			m.event = eventAt
			m.last = max(m.last, now)
			if online {
				m.offline = 0
			} else {
				m.offline = now
			}
			// Only this member's deadlines moved: a login storm of a
			// crowd's gateway does not walk the crowd once per callback.
			rp.scheduleTouchedLocked(now, []int64{user})
			n++
		}
		rp.mu.Unlock()
	}
	return n
}
