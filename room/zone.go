package room

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"sync"
	"time"
)

// zoneinfo is the IANA zone database the service decides business days
// with: a copy of Go's lib/time/zoneinfo.zip, kept in the repository.
// time.LoadLocation would prefer $ZONEINFO and the host's /usr/share/zoneinfo
// to any copy in the binary, so two nodes with different zone data could
// apply, or replay, one room's commands on different business days. A new
// copy here changes the zones of every node at once, as a new build.
//
//go:embed zoneinfo.zip
var zoneinfo []byte

var zoneIndex = sync.OnceValues(func() (map[string]*zip.File, error) {
	r, err := zip.NewReader(bytes.NewReader(zoneinfo), int64(len(zoneinfo)))
	if err != nil {
		return nil, fmt.Errorf("the built-in zone database: %w", err)
	}
	files := make(map[string]*zip.File, len(r.File))
	for _, f := range r.File {
		files[f.Name] = f
	}
	return files, nil
})

// zoneFromBuiltIn loads the zone name from the built-in zone database.
func zoneFromBuiltIn(name string) (*time.Location, error) {
	if name == "UTC" {
		return time.UTC, nil
	}
	files, err := zoneIndex()
	if err != nil {
		return nil, err
	}
	f, ok := files[name]
	if !ok {
		return nil, fmt.Errorf("unknown time zone %s", name)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("time zone %s: %w", name, err)
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("time zone %s: %w", name, err)
	}
	return time.LoadLocationFromTZData(name, data)
}
