package room

import "strings"

// Prefixes of the command ids of the commands the service issues itself.
// No client command may take one (CheckOrigin): a client's command logged
// under the id of one the service issues later would make the log refuse
// that one as a conflict (a rules switch the room then never gets past, a
// rocket that never launches).
const (
	RulesIDPrefix        = "rules/"         // SetRules, then the version it applies at
	RocketLaunchIDPrefix = "rocket-launch/" // LaunchRocket, then the rocket id
	MicExpiryIDPrefix    = "mic-expire/"    // ExpireMicQueue, then its due time
	PresenceIDPrefix     = "presence/"      // ExpirePresence, then a random suffix
)

var internalIDPrefixes = [...]string{RulesIDPrefix, RocketLaunchIDPrefix, MicExpiryIDPrefix, PresenceIDPrefix}

// Internal reports whether c is a command the service issues itself, which
// the API never submits; each such command's own check requires
// SystemOperator with the platform flag.
func Internal(c Command) bool {
	switch c.(type) {
	case *SetRules, *LaunchRocket, *ExpireMicQueue, *ExpirePresence:
		return true
	}
	return false
}

// ReservedCommandID reports whether id has the prefix of a command the
// service issues itself.
func ReservedCommandID(id string) bool {
	for _, p := range internalIDPrefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// CheckOrigin checks what a new command must pass besides Validate: only
// the service's own commands (Internal) are issued as SystemOperator or
// take a command id it keeps for them (ReservedCommandID). It is not part
// of Validate, which replay runs as well: a log written before this check
// may hold a client's command under such an id, and replay applies it as
// it was applied then.
func (env *Envelope) CheckOrigin() error {
	if Internal(env.Command) {
		return nil
	}
	if env.Operator == SystemOperator {
		return ErrReservedOperator
	}
	if ReservedCommandID(env.CommandID) {
		return Errorf(ErrReservedCommandID, "command_id %q starts with a prefix the service keeps for its own commands", env.CommandID)
	}
	return nil
}
