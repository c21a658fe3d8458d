package rpc

import (
	"math/rand/v2"
	"slices"
	"testing"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// TestFirstMembersIsTheHeadOfTheSortedRoom: the bounded selection gives
// what sorting the whole room and cutting it would, for every page size.
func TestFirstMembersIsTheHeadOfTheSortedRoom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	members := make([]*roomv1.Member, 300)
	for i := range members {
		members[i] = &roomv1.Member{UserId: int64(i + 1), JoinedAtMs: rng.Int64N(40)} // many ties
	}
	rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	from := memberKey{20, 150}
	key := func(mb *roomv1.Member) (memberKey, bool) {
		k := memberKey{mb.GetJoinedAtMs(), mb.GetUserId()}
		return k, compareMemberKey(k, from) > 0
	}
	var sorted []memberKey
	for _, mb := range members {
		if k, ok := key(mb); ok {
			sorted = append(sorted, k)
		}
	}
	slices.SortFunc(sorted, compareMemberKey)
	for _, n := range []int{1, 2, 3, 50, len(sorted), len(sorted) + 5} {
		var got []memberKey
		for _, e := range firstMembers(members, n, key) {
			got = append(got, e.key)
		}
		if want := sorted[:min(n, len(sorted))]; !slices.Equal(got, want) {
			t.Fatalf("n=%d: %v, want %v", n, got, want)
		}
	}
}
