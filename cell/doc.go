// Package cell runs rooms: one Cell (a single-writer actor) per loaded room,
// and the Registry that loads, routes to, passivates and stops them. A cell
// applies commands through the pure domain, commits them in batches fenced
// by its owner epoch, answers, and only then hands events to the sink.
//
// The engine (cell.go, registry.go, committer.go, recover.go) knows no
// command: it takes what is queued in a room's mailbox, applies each command
// with room.Apply, builds one store.Batch (log rows, outbox rows, an
// occasional snapshot), commits it through the group committer and answers.
// What a command needs beyond that comes from a Feature (feature.go), the one
// extension point, whose hooks the engine calls at fixed moments:
//
//	Admit       on Submit, before the room loads        create.go: the room's metadata row
//	Lead        before a run of commands is decided     rules.go: the logged switch to the configured rules
//	Prepare     before a run of one kind applies        gift.go: a run of gifts paid for at once; each
//	            (its Verdict may add to the batch)      Verdict adds the gift's charge or settle key
//	Contribute  while the batch is built                create.go, rocket.go (timer rows)
//	Loaded, Committed, Stopped                          rocket.go: in-memory launches, armed and fired in order
//	Fire        for due durable timers of its kind      rocket.go: rooms no node serves
//
// The features are listed once, in builtin.go. The storage the package uses
// is declared next to it (ports.go: Store, Log), not the whole Repository.
package cell
