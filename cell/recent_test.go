package cell

import (
	"fmt"
	"testing"
	"time"
)

// TestOlderIDsAreBoundedByCountAndAge: the ids a room remembers without
// their answers are the newest olderIDs, and none older than olderFor.
func TestOlderIDsAreBoundedByCountAndAge(t *testing.T) {
	var r idRing
	start := time.Now()
	const n = olderIDs + 1000
	for i := range n {
		r.add(fmt.Sprint("c", i), start)
	}
	if r.n != olderIDs || len(r.set) != olderIDs {
		t.Fatalf("%d ids in the ring, %d in the set, want %d", r.n, len(r.set), olderIDs)
	}
	for _, i := range []int{0, 999} {
		if _, ok := r.set[fmt.Sprint("c", i)]; ok {
			t.Fatalf("c%d is still remembered", i)
		}
	}
	for _, i := range []int{1000, n - 1} {
		if _, ok := r.set[fmt.Sprint("c", i)]; !ok {
			t.Fatalf("c%d is forgotten", i)
		}
	}
	r.add("late", start.Add(olderFor+time.Second))
	if r.n != 1 || len(r.set) != 1 {
		t.Fatalf("after %s: %d ids remembered, want only the new one", olderFor, r.n)
	}
	if _, ok := r.set["late"]; !ok {
		t.Fatal("the new id is forgotten")
	}
}
