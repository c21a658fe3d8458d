package cell

import (
	"context"
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// Feature is the engine's one extension point: what a feature (room
// creation, economy rules, gifts, rocket launches) needs from the engine
// besides room.Apply, as hooks the engine calls at fixed moments. Every
// hook is optional: a nil hook is not called. The cell decides, batches,
// commits and answers; it knows no command beyond what these hooks tell it,
// so a new command that must charge, write a row or arm a timer brings a
// Feature instead of changing the cell.
//
// Hooks that get a *room.State run on the room's goroutine, which owns the
// state: they read it, never change it, and do not keep it. A hook that
// waits (on storage, on the wallet) holds up its room, never another.
type Feature struct {
	// Admit runs on the caller's goroutine when a command is submitted,
	// before its room is loaded; an error refuses the command.
	Admit func(ctx context.Context, env *room.Envelope) error
	// Lead runs on the room's goroutine before the cell decides a command
	// that starts a run. It returns a command the cell applies and commits
	// ahead of it, or nil.
	Lead func(s *room.State) *room.Envelope
	// Runs are the command types Prepare decides. Consecutive commands of
	// these types in one batch form a run, prepared together.
	Runs []room.CommandType
	// Prepare runs on the room's goroutine before a run applies, with the
	// commands of the run that are not answered from their ids, in order,
	// their times set. It fills in what each command records (a gift's
	// charge) and returns one Verdict per command, in the same order. It
	// may wait on a service: the room waits once per run.
	Prepare func(ctx context.Context, s *room.State, run []*room.Envelope) []Verdict
	// Contribute runs on the room's goroutine for each command that
	// applied, as the cell builds the batch: it adds to b what must commit
	// with the command besides its log row and outbox rows.
	Contribute func(b *store.Batch, env *room.Envelope, events []room.Event, now time.Time) error
	// Loaded runs once a room's state is loaded or reloaded from storage,
	// before the room takes a command.
	Loaded func(s *room.State)
	// Committed runs on the room's goroutine once a batch committed, before
	// its callers are answered.
	Committed func(batch []room.Committed)
	// Stopped runs when a room's cell stops, or a loaded room is discarded.
	Stopped func(roomID string)
	// TimerKind is the kind of the durable timers (store.Timer) Fire fires.
	TimerKind string
	// Fire runs on the timer scanner's goroutines with the due timers of
	// TimerKind of one room.
	Fire func(ctx context.Context, roomID string, due []store.Timer)
	// Settled runs on the room's goroutine each time the state is the
	// room's committed state anew: once loaded or reloaded, and after each
	// batch committed (after Committed). epoch is the room's owner epoch.
	Settled func(s *room.State, epoch int64)
}

// Verdict is a Feature's decision on one command of a prepared run. The
// zero Verdict applies the command.
type Verdict struct {
	// Err refuses the command with this error.
	Err error
	// Logged is the command's log row when the command turned out to have
	// committed already (a retry the cell did not know): the cell answers
	// it from the row.
	Logged *store.CommandRecord
	// Commit, when set, adds to the batch that commits the applied command
	// what this decision must commit with it (a gift's charge).
	Commit func(b *store.Batch)
}

// features are a registry's features and the lookups the cell uses.
type features struct {
	all    []Feature
	runs   map[room.CommandType]*Feature // who prepares runs of a type
	timers map[string]*Feature           // who fires timers of a kind
}

func newFeatures(all ...Feature) features {
	fs := features{all: all, runs: make(map[room.CommandType]*Feature), timers: make(map[string]*Feature)}
	for i := range fs.all {
		f := &fs.all[i]
		for _, t := range f.Runs {
			fs.runs[t] = f
		}
		if f.TimerKind != "" {
			fs.timers[f.TimerKind] = f
		}
	}
	return fs
}

func (fs features) admit(ctx context.Context, env *room.Envelope) error {
	for _, f := range fs.all {
		if f.Admit != nil {
			if err := f.Admit(ctx, env); err != nil {
				return err
			}
		}
	}
	return nil
}

func (fs features) contribute(b *store.Batch, env *room.Envelope, events []room.Event, now time.Time) error {
	for _, f := range fs.all {
		if f.Contribute != nil {
			if err := f.Contribute(b, env, events, now); err != nil {
				return err
			}
		}
	}
	return nil
}

func (fs features) loaded(s *room.State) {
	for _, f := range fs.all {
		if f.Loaded != nil {
			f.Loaded(s)
		}
	}
}

func (fs features) committed(batch []room.Committed) {
	for _, f := range fs.all {
		if f.Committed != nil {
			f.Committed(batch)
		}
	}
}

func (fs features) stopped(roomID string) {
	for _, f := range fs.all {
		if f.Stopped != nil {
			f.Stopped(roomID)
		}
	}
}

func (fs features) settled(s *room.State, epoch int64) {
	for _, f := range fs.all {
		if f.Settled != nil {
			f.Settled(s, epoch)
		}
	}
}
