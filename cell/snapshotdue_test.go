package cell

import "testing"

func TestSnapshotDue(t *testing.T) {
	for _, c := range []struct {
		name                   string
		since                  int64
		logged, snapBytes, gap int
		want                   bool
	}{
		{"before every commands", 9, 1 << 20, 0, 10, false},
		{"every commands, no snapshot yet", 10, 1, 0, 10, true},
		{"every commands, log larger than the snapshot", 10, 5000, 4000, 10, true},
		{"every commands, log as large as the snapshot", 10, 4000, 4000, 10, true},
		{"every commands, snapshot larger than the log", 10, 3999, 4000, 10, false},
		{"snapshot larger, log catches up later", 40, 4000, 4000, 10, true},
		{"snapshot larger, one command short of the stretch", SnapshotStretch*10 - 1, 10, 1 << 20, 10, false},
		{"snapshot larger, the stretch reached", SnapshotStretch * 10, 10, 1 << 20, 10, true},
	} {
		if got := snapshotDue(c.since, c.logged, c.snapBytes, c.gap); got != c.want {
			t.Errorf("%s: snapshotDue(%d, %d, %d, %d) = %v, want %v", c.name, c.since, c.logged, c.snapBytes, c.gap, got, c.want)
		}
	}
}
