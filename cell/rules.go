package cell

import (
	"strconv"

	"hyapp/room-service/room"
)

// rulesSwitch is the feature that moves an open room running under other
// economy rules than the configured ones to those: it leads the next
// command the room decides with a SetRules command, logged and committed
// with it, so replay applies every command under the rules it was decided
// with. The domain refuses rules only as the configuration's validation
// does, so a refused switch is unreachable; should it happen the room
// keeps its recorded rules rather than refusing every command.
type rulesSwitch struct {
	rules *room.Rules
}

func (rs rulesSwitch) feature() Feature { return Feature{Lead: rs.lead} }

func (rs rulesSwitch) lead(s *room.State) *room.Envelope {
	if s.Status != room.StatusOpen || s.RecordsRules(rs.rules) {
		return nil
	}
	return &room.Envelope{
		RoomID: s.RoomID, CommandID: RulesCommandID(s.Version + 1),
		Operator: room.SystemOperator, Platform: true, Command: room.NewSetRules(rs.rules),
	}
}

// RulesCommandID is the command id of the SetRules command applied at
// version v: unique within the room, and never one a client sends with a
// room_id-scoped retry in mind.
func RulesCommandID(v int64) string { return room.RulesIDPrefix + strconv.FormatInt(v, 10) }
