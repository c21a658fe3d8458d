package timlocal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// savedGroup is what the state file keeps of a group: what it is and who is muted or banned. Message
// history, statistics and the duplicate check start empty after a restart.
type savedGroup struct {
	ID        string               `json:"id"`
	Type      string               `json:"type"`
	Name      string               `json:"name"`
	Owner     string               `json:"owner,omitempty"`
	Created   time.Time            `json:"created"`
	ShutUpAll bool                 `json:"shut_up_all,omitempty"`
	Muted     map[string]time.Time `json:"muted,omitempty"`
	Banned    map[string]time.Time `json:"banned,omitempty"`
}

// Persist makes the groups outlive the process: it loads the groups saved in path, if the file exists,
// and from then on rewrites the file after every call that creates, destroys or changes a group (its
// name, mute-all, mutes and bans). Each write goes to a temporary file that is renamed over path, so a
// killed process leaves the old or the new state, never a torn one. Messages are not kept. Call Persist
// before serving; a file that cannot be read or parsed is an error and changes nothing.
func (s *Server) Persist(path string) error {
	var saved []savedGroup
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("timlocal state %s: %w", path, err)
	default:
		if err := json.Unmarshal(data, &saved); err != nil {
			return fmt.Errorf("timlocal state %s: %w", path, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("timlocal state %s: %w", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sg := range saved {
		g := newGroup(sg.ID, sg.Type, sg.Name, sg.Owner, sg.Created)
		g.shutUpAll = sg.ShutUpAll
		maps.Copy(g.muted, sg.Muted)
		maps.Copy(g.banned, sg.Banned)
		s.groups[sg.ID] = g
	}
	s.statePath = path
	return nil
}

// saveLocked writes the groups to the state file, if there is one; the caller holds s.mu. A failed write
// does not fail the call that changed the group (its effect is real); it is kept for the page and
// retried by the next change.
func (s *Server) saveLocked() {
	if s.statePath == "" {
		return
	}
	saved := make([]savedGroup, 0, len(s.groups))
	now := s.now()
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		saved = append(saved, savedGroup{
			ID: g.id, Type: g.typ, Name: g.name, Owner: g.owner, Created: g.created, ShutUpAll: g.shutUpAll,
			Muted: active(g.muted, now), Banned: active(g.banned, now),
		})
	}
	s.saveErr = writeAtomic(s.statePath, saved)
}

func writeAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("save timlocal state %s: %w", path, err)
	}
	return nil
}
