package bench

import (
	"context"
	"testing"
	"time"
)

// TestGiftScenarios runs the gift scenarios small on SQLite: every gift
// commits with its charge and the ledger agrees with the command logs.
func TestGiftScenarios(t *testing.T) {
	ctx := context.Background()
	env := SQLite(t.TempDir())
	rows, err := GiftStorm(ctx, env, 16, 400, time.Millisecond)
	if err != nil {
		t.Fatalf("GiftStorm: %v", err)
	}
	for _, r := range rows {
		if r.Ops != 400 {
			t.Errorf("%s: %d ops, want 400", r.Name, r.Ops)
		}
	}
	rows, err = GiftRooms(ctx, env, 10, 20, 500*time.Millisecond)
	if err != nil {
		t.Fatalf("GiftRooms: %v", err)
	}
	if len(rows) != 2 || rows[1].Ops != 100 {
		t.Fatalf("GiftRooms rows %+v, want the paced row and the agreement of 100 gifts", rows)
	}
}
