package room

// Committed is one committed command and the events it caused, as the
// engine hands it on once its transaction committed (to the IM lane, to the
// features that act after a commit). It lives in the domain so that the
// engine and the adapters that consume it need not import each other.
type Committed struct {
	RoomID      string
	RoomVersion int64
	CommandID   string
	CommandType CommandType
	Operator    int64
	At          int64 // unix ms
	Events      []Event
	// Seats is the seat list after the command, set when it changed a seat
	// (so the IM lane can show the whole mic row); nil otherwise.
	Seats []Seat
	// Trace is the W3C traceparent of the command's span when it was
	// traced, "" otherwise: the IM lane sends its events within that trace.
	Trace string
}
