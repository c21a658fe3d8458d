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
// and from then on rewrites the file within saveDelay of a call that creates, destroys or changes a
// group (its name, mute-all, mutes and bans), once for all the changes of that time, and at Flush. Each
// write goes to a temporary file that is renamed over path, so a killed process leaves the old or the
// new state, never a torn one; it loses at most the changes of the last saveDelay (the service creates
// a group again that a send finds missing). Messages are not kept. Call Persist before serving; a file
// that cannot be read or parsed is an error and changes nothing.
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

// saveDelay bounds how long a change waits to be written: a write rewrites every group, so
// writing per change made creating many rooms cost time that grows with the number of rooms, and
// with tens of thousands of groups even ten writes a second took a twentieth of the service's CPU
// while rooms were being created.
const saveDelay = time.Second

// saveLocked schedules a write of the groups to the state file, if there is one; the caller holds s.mu.
// A failed write does not fail the call that changed the group (its effect is real); it is kept for the
// page and retried by the next change.
func (s *Server) saveLocked() {
	if s.statePath == "" || s.saveTimer != nil {
		return
	}
	s.saveTimer = time.AfterFunc(saveDelay, func() { _ = s.Flush() })
}

// Flush writes the groups' changes not written yet to the state file now and returns the last write's
// error. The service calls it when it stops.
func (s *Server) Flush() error {
	s.writeMu.Lock() // writes go out in the order their contents were read
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.saveTimer == nil {
		err := s.saveErr
		s.mu.Unlock()
		return err
	}
	s.saveTimer.Stop()
	s.saveTimer = nil
	saved := s.savedLocked()
	path := s.statePath
	s.mu.Unlock()
	err := writeAtomic(path, saved)
	s.mu.Lock()
	s.saveErr = err
	s.mu.Unlock()
	return err
}

// savedLocked is what the state file keeps of the groups now; the caller holds s.mu.
func (s *Server) savedLocked() []savedGroup {
	saved := make([]savedGroup, 0, len(s.groups))
	now := s.now()
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		saved = append(saved, savedGroup{
			ID: g.id, Type: g.typ, Name: g.name, Owner: g.owner, Created: g.created, ShutUpAll: g.shutUpAll,
			Muted: active(g.muted, now), Banned: active(g.banned, now),
		})
	}
	return saved
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
