package store

// DirectoryRow is a room's row of the room directory (table
// room_directory): what a lobby shows of a room, written by the node that
// owns the room from its committed state. Times are unix ms.
type DirectoryRow struct {
	RoomID string
	// OwnerEpoch and RoomVersion fence the row: a write replaces a row only
	// when it comes from the same or a later owner epoch and, in the same
	// epoch, the same or a later version. A node that lost the room cannot
	// overwrite what the next owner wrote.
	OwnerEpoch  int64
	RoomVersion int64
	// OwnerNode is the node that wrote the row.
	OwnerNode    string
	Status       string
	OwnerUserID  int64
	HostUserID   int64
	SeatCount    int32
	Mode         string
	Region       string
	Title        string
	CoverURL     string
	OnlineCount  int32
	SeatsTaken   int32
	Heat         int64
	CreatedAt    int64
	LastActiveAt int64
}

// DirectoryOrder is the order of a directory listing. Every order is
// descending and breaks ties by descending room id.
type DirectoryOrder string

// Directory orders.
const (
	OrderHeat   DirectoryOrder = "heat"
	OrderOnline DirectoryOrder = "online"
	OrderNewest DirectoryOrder = "newest"
)

// DirectoryCursor is a position in a directory listing: the order value
// and room id of the last row shown. The zero cursor starts at the top.
type DirectoryCursor struct {
	Value  int64
	RoomID string
}

// DirectoryQuery selects and orders directory rows.
type DirectoryQuery struct {
	Order DirectoryOrder
	// Status is required; Region and Mode, when set, must match exactly.
	Status string
	Region string
	Mode   string
	// After lists the rows that sort after this position; nil: from the top.
	After *DirectoryCursor
	Limit int
}

// Value returns the row's value in order o.
func (r *DirectoryRow) Value(o DirectoryOrder) int64 {
	switch o {
	case OrderOnline:
		return int64(r.OnlineCount)
	case OrderNewest:
		return r.CreatedAt
	}
	return r.Heat
}

// GiftRecord is one committed gift to one receiver (table
// room_gift_records), written in the transaction that commits the gift.
type GiftRecord struct {
	// RecordID is assigned on insert, increasing in commit order.
	RecordID     int64
	RoomID       string
	RoomVersion  int64
	CommandID    string
	SenderUserID int64
	ReceiverID   int64
	GiftID       string
	Count        int32
	// Value is price x count: what this receiver got.
	Value        int64
	MultiplierBP int64
	SentAt       int64 // unix ms
}

// GiftRecordQuery selects gift records: exactly one of RoomID and UserID.
type GiftRecordQuery struct {
	RoomID string
	UserID int64
	// Received lists the gifts UserID received instead of those it sent.
	Received bool
	// BeforeID lists records with a lower id; 0: from the newest.
	BeforeID int64
	Limit    int
}
