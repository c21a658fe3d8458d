package room

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestTheBusinessDayIgnoresTheHostZoneDatabase: a host whose zone database
// says otherwise ($ZONEINFO here, an old /usr/share/zoneinfo elsewhere)
// changes no room's business day. The check runs in a child process, since
// the time package reads $ZONEINFO once per process.
func TestTheBusinessDayIgnoresTheHostZoneDatabase(t *testing.T) {
	at := time.Date(2026, 6, 1, 20, 0, 0, 0, time.UTC).UnixMilli()
	if os.Getenv("ROOM_ZONE_CHILD") != "" {
		r, err := RulesSpec{TimeZone: "Asia/Shanghai", RankSize: 10}.Rules()
		if err != nil {
			t.Fatal(err)
		}
		want := (at + 8*3600*1000) / (24 * 3600 * 1000) // Shanghai is UTC+8
		if got := r.Day(at); got != want {
			t.Fatalf("business day of %d in Asia/Shanghai: %d with the host's zone database, %d with the service's", at, got, want)
		}
		return
	}
	// A host database whose Asia/Shanghai is New York's.
	files, err := zoneIndex()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := files["America/New_York"].Open()
	if err != nil {
		t.Fatal(err)
	}
	other, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "Asia"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Asia", "Shanghai"), other, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTheBusinessDayIgnoresTheHostZoneDatabase$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ROOM_ZONE_CHILD=1", "ZONEINFO="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("with the host's Asia/Shanghai made New York's: %v\n%s", err, out)
	}
}
