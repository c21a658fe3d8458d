package cell

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkStateChangeInACrowd: a Tencent IM login or disconnect of one
// member moves that member's deadlines alone, so its cost must not grow
// with the room: a gateway that reconnects a crowd of 100,000 listeners
// sends 100,000 callbacks to the room they are in.
//
//	go test ./cell -run '^$' -bench StateChangeInACrowd
func BenchmarkStateChangeInACrowd(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			p := crowdPresence(b, n)
			b.ResetTimer()
			for i := range b.N {
				user := int64(1 + i%n)
				if i%2 == 0 {
					p.stateChange(user, int64(i), false)
				} else {
					p.stateChange(user, int64(i), true)
				}
			}
		})
	}
}

// crowdPresence is the presence of one loaded room of n members (user ids
// 1..n), with its timer armed, as after the room's load. It needs no
// registry beyond its settings: nothing in it comes due while it is used.
func crowdPresence(tb testing.TB, n int) *presence {
	reg := &Registry{cfg: Config{PresenceTimeout: 90 * time.Second, MicOfflineGrace: 30 * time.Second, Clock: time.Now}}
	p := newPresence(reg)
	rp := &roomPresence{p: p, roomID: "crowd", members: make(map[int64]*seen, n), seated: map[int64]int32{1: 0}}
	now := p.now()
	p.mu.Lock()
	p.rooms[rp.roomID] = rp
	for u := int64(1); u <= int64(n); u++ {
		rp.members[u] = &seen{last: now}
		p.indexLocked(u, rp, true)
	}
	p.mu.Unlock()
	rp.mu.Lock()
	rp.scheduleLocked(now)
	rp.mu.Unlock()
	tb.Cleanup(func() { p.stopped(rp.roomID) })
	return p
}
