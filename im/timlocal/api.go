package timlocal

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// commands are the group_open_http_svc commands the fake implements; others answer 10003.
var commands = map[string]func(*Server, request) reply{
	"create_group":           (*Server).createGroup,
	"destroy_group":          (*Server).destroyGroup,
	"send_group_msg":         (*Server).sendGroupMsg,
	"forbid_send_msg":        (*Server).forbidSendMsg,
	"get_group_shutted_uin":  (*Server).getGroupShuttedUin,
	"ban_group_member":       (*Server).banGroupMember,
	"unban_group_member":     (*Server).unbanGroupMember,
	"get_group_ban_member":   (*Server).getGroupBanMember,
	"modify_group_base_info": (*Server).modifyGroupBaseInfo,
}

// Documented limits (reference sections 3 and 4.4).
const (
	maxGroupIDLen      = 48
	maxNameLen         = 30
	maxIntroductionLen = 240
	maxNotificationLen = 300
	maxFaceURLLen      = 100
	maxForbidMembers   = 500
	maxBanMembers      = 20
	maxBanDescription  = 1000
	maxBanListLimit    = 100
	autoGroupPrefix    = "@TGS#"
	avChatRoom         = "AVChatRoom"
	customElem         = "TIMCustomElem"
	textElem           = "TIMTextElem"
	dropReasonFreqCtrl = "MsgFreqCtrl"
)

var groupTypes = []string{"Private", "Public", "ChatRoom", avChatRoom, "Community"}

// decode checks that the body has only the given keys, compared case-sensitively as Tencent does (Go's
// decoder alone would accept "groupid" for GroupId), then decodes it into v. Unknown keys are refused,
// which is stricter than Tencent: a misspelt key fails here instead of being ignored in production.
func (r request) decode(v any, keys ...string) (reply, bool) {
	if rep, ok := onlyKeys(r.fields, keys...); !ok {
		return rep, false
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		return fail(10004, "invalid parameter: %v", err), false
	}
	return reply{}, true
}

// onlyKeys refuses an object with a key not in keys.
func onlyKeys[V any](fields map[string]V, keys ...string) (reply, bool) {
	for k := range fields {
		if !slices.Contains(keys, k) {
			return fail(10004, "invalid parameter: unknown field %q", k), false
		}
	}
	return reply{}, true
}

// validGroupID reports whether id can name a group: 1 to 48 bytes of printable ASCII.
func validGroupID(id string) bool {
	if id == "" || len(id) > maxGroupIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// lookup finds a group for a command; the caller holds s.mu.
func (s *Server) lookup(id string) (*group, reply, bool) {
	switch {
	case id == "":
		return nil, fail(10004, "invalid parameter: GroupId is required"), false
	case !validGroupID(id):
		return nil, fail(10015, "invalid group ID %q", id), false
	}
	g := s.groups[id]
	if g == nil {
		return nil, fail(10010, "group %s does not exist or was dissolved", id), false
	}
	return g, reply{}, true
}

func (s *Server) createGroup(r request) reply {
	var req struct {
		OwnerAccount    string            `json:"Owner_Account"`
		Type            string            `json:"Type"`
		GroupID         string            `json:"GroupId"`
		Name            string            `json:"Name"`
		Introduction    string            `json:"Introduction"`
		Notification    string            `json:"Notification"`
		FaceURL         string            `json:"FaceUrl"`
		MaxMemberCount  uint32            `json:"MaxMemberCount"`
		ApplyJoinOption string            `json:"ApplyJoinOption"`
		AppDefinedData  []json.RawMessage `json:"AppDefinedData"`
		MemberList      []json.RawMessage `json:"MemberList"`
	}
	if rep, ok := r.decode(&req, "Owner_Account", "Type", "GroupId", "Name", "Introduction", "Notification",
		"FaceUrl", "MaxMemberCount", "ApplyJoinOption", "AppDefinedData", "MemberList"); !ok {
		return rep
	}
	switch {
	case !slices.Contains(groupTypes, req.Type):
		return fail(10004, "invalid parameter: Type %q is not one of %v", req.Type, groupTypes)
	case req.Name == "":
		return fail(10004, "invalid parameter: Name is required")
	case len(req.Name) > maxNameLen:
		return fail(10004, "invalid parameter: Name is %d bytes, the limit is %d", len(req.Name), maxNameLen)
	case len(req.Introduction) > maxIntroductionLen, len(req.Notification) > maxNotificationLen,
		len(req.FaceURL) > maxFaceURLLen:
		return fail(10004, "invalid parameter: Introduction, Notification or FaceUrl too long")
	case req.Type == avChatRoom && len(req.MemberList) > 0:
		return fail(10007, "no permission: an AVChatRoom cannot be created with members")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := req.GroupID
	if id == "" {
		s.autoID++
		id = autoGroupPrefix + strings.ToUpper(strconv.FormatUint(1<<40+s.autoID, 36))
	} else {
		if !validGroupID(id) || strings.HasPrefix(id, autoGroupPrefix) {
			return fail(10015, "invalid group ID %q: up to 48 printable ASCII bytes, not starting with %s", id, autoGroupPrefix)
		}
		if g := s.groups[id]; g != nil {
			if req.OwnerAccount != "" && g.owner == req.OwnerAccount {
				return fail(10025, "group ID %s is in use and you are its owner", id)
			}
			return fail(10021, "group ID %s is in use", id)
		}
	}
	s.groups[id] = newGroup(id, req.Type, req.Name, req.OwnerAccount, r.now)
	s.saveLocked()
	return ok(map[string]any{"GroupId": id})
}

func (s *Server) destroyGroup(r request) reply {
	var req struct {
		GroupID string `json:"GroupId"`
	}
	if rep, ok := r.decode(&req, "GroupId"); !ok {
		return rep
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, rep, ok := s.lookup(req.GroupID); !ok {
		return rep
	}
	delete(s.groups, req.GroupID)
	s.saveLocked()
	return ok(nil)
}

func (s *Server) sendGroupMsg(r request) reply {
	var req struct {
		GroupID     string  `json:"GroupId"`
		Random      *uint32 `json:"Random"`
		MsgPriority *string `json:"MsgPriority"`
		MsgBody     []any   `json:"MsgBody"`
		FromAccount string  `json:"From_Account"`
		// Accepted and not modelled.
		OnlineOnlyFlag          int               `json:"OnlineOnlyFlag"`
		SendMsgControl          []string          `json:"SendMsgControl"`
		ForbidCallbackControl   []string          `json:"ForbidCallbackControl"`
		OfflinePushInfo         json.RawMessage   `json:"OfflinePushInfo"`
		CloudCustomData         string            `json:"CloudCustomData"`
		GroupAtInfo             []json.RawMessage `json:"GroupAtInfo"`
		ToAccount               []string          `json:"To_Account"`
		TopicID                 string            `json:"TopicId"`
		SupportMessageExtension int               `json:"SupportMessageExtension"`
	}
	if rep, ok := r.decode(&req, "GroupId", "Random", "MsgPriority", "MsgBody", "From_Account",
		"OnlineOnlyFlag", "SendMsgControl", "ForbidCallbackControl", "OfflinePushInfo", "CloudCustomData",
		"GroupAtInfo", "To_Account", "TopicId", "SupportMessageExtension"); !ok {
		return rep
	}
	if req.Random == nil {
		return fail(10004, "invalid parameter: Random is required")
	}
	priority := "Normal"
	if req.MsgPriority != nil {
		priority = *req.MsgPriority
	}
	if !slices.Contains([]string{"High", "Normal", "Low"}, priority) {
		return fail(10004, "invalid parameter: MsgPriority %q is not High, Normal or Low (case-sensitive)", priority)
	}
	if len(req.MsgBody) == 0 {
		return fail(10004, "invalid parameter: MsgBody is required")
	}
	elems, size, rep, valid := parseElements(req.MsgBody)
	if !valid {
		return rep
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	g, rep, found := s.lookup(req.GroupID)
	if !found {
		return rep
	}
	if size > s.cfg.MaxMsgBytes {
		return fail(80002, "message content too long: %d bytes, the limit is %d", size, s.cfg.MaxMsgBytes)
	}
	if until, muted := g.muted[req.FromAccount]; muted && req.FromAccount != "" && until.After(r.now) {
		return fail(10017, "sender %s is muted", req.FromAccount)
	}
	if g.shutUpAll && req.FromAccount != "" && req.FromAccount != s.cfg.Admin && req.FromAccount != g.owner {
		return fail(10017, "sender %s is muted: the group mutes all members", req.FromAccount)
	}
	if prev, dup := g.duplicate(*req.Random, r.now); dup {
		// Undocumented what Tencent answers; repeating the first answer makes a retry look like the
		// original call, which is what an idempotent sender needs.
		g.stats.Duplicates++
		return sendReply(prev)
	}
	g.seq++
	m := Message{
		MsgSeq: g.seq, Random: *req.Random, Time: r.now, Priority: priority, From: req.FromAccount,
		Elements: elems,
	}
	for _, e := range elems {
		if e.Type == customElem {
			m.Data, m.Desc = e.Data, e.Desc
		}
	}
	if !g.admit(r.now, priority, s.cfg.GroupRate) {
		m.Dropped, m.DropReason = true, dropReasonFreqCtrl
	}
	g.record(m)
	answer := sent{at: r.now, seq: m.MsgSeq, drop: m.DropReason}
	g.seen[m.Random] = answer
	g.seenOrder = append(g.seenOrder, m.Random)
	return sendReply(answer)
}

func sendReply(a sent) reply {
	fields := map[string]any{"MsgSeq": a.seq, "MsgTime": a.at.Unix()}
	if a.drop != "" {
		fields["MsgDropReason"] = a.drop
	}
	return ok(fields)
}

// parseElements validates MsgBody elements and returns them with the bytes of their contents, which is
// what the size limit counts. The body comes decoded as plain JSON values, in the same pass as the rest of
// the request: a message's Data is most of its bytes, and decoding each level again would read them
// once per level.
func parseElements(body []any) ([]Element, int, reply, bool) {
	elems := make([]Element, 0, len(body))
	size, customs := 0, 0
	for i, v := range body {
		fields, isObject := v.(map[string]any)
		if !isObject {
			return nil, 0, fail(10004, "invalid parameter: MsgBody[%d] is not an object", i), false
		}
		if rep, ok := onlyKeys(fields, "MsgType", "MsgContent"); !ok {
			return nil, 0, rep, false
		}
		msgType, rep, ok := stringField(fields, "MsgType", i)
		if !ok {
			return nil, 0, rep, false
		}
		content, isObject := fields["MsgContent"].(map[string]any)
		if !isObject {
			return nil, 0, fail(10004, "invalid parameter: MsgBody[%d].MsgContent is not an object", i), false
		}
		var e Element
		switch msgType {
		case customElem:
			if customs++; customs > 1 {
				return nil, 0, fail(10004, "invalid parameter: at most one TIMCustomElem per message"), false
			}
			if rep, ok := onlyKeys(content, "Data", "Desc", "Ext", "Sound"); !ok {
				return nil, 0, rep, false
			}
			e.Type = customElem
			for _, f := range []struct {
				key string
				to  *string
			}{{"Data", &e.Data}, {"Desc", &e.Desc}, {"Ext", &e.Ext}, {"Sound", &e.Sound}} {
				if *f.to, rep, ok = stringField(content, f.key, i); !ok {
					return nil, 0, rep, false
				}
			}
			size += len(e.Data) + len(e.Desc) + len(e.Ext) + len(e.Sound)
		case textElem:
			if rep, ok := onlyKeys(content, "Text"); !ok {
				return nil, 0, rep, false
			}
			if content["Text"] == nil {
				return nil, 0, fail(10004, "invalid parameter: MsgBody[%d] TIMTextElem needs Text", i), false
			}
			e.Type = textElem
			if e.Text, rep, ok = stringField(content, "Text", i); !ok {
				return nil, 0, rep, false
			}
			size += len(e.Text)
		default:
			return nil, 0, fail(10004, "invalid parameter: MsgBody[%d] MsgType %q is not supported here (TIMCustomElem, TIMTextElem)", i, msgType), false
		}
		elems = append(elems, e)
	}
	return elems, size, reply{}, true
}

// stringField returns a string field of MsgBody[i]: absent and null are "", as Go's decoder leaves them.
func stringField(fields map[string]any, key string, i int) (string, reply, bool) {
	switch v := fields[key].(type) {
	case nil:
		return "", reply{}, true
	case string:
		return v, reply{}, true
	default:
		return "", fail(10004, "invalid parameter: MsgBody[%d].%s is not a string", i, key), false
	}
}

// members validates a Members_Account list.
func members(list []string, limit int) (reply, bool) {
	if len(list) == 0 || len(list) > limit {
		return fail(10004, "invalid parameter: Members_Account needs 1 to %d accounts, got %d", limit, len(list)), false
	}
	if slices.Contains(list, "") {
		return fail(10004, "invalid parameter: empty account in Members_Account"), false
	}
	return reply{}, true
}

func (s *Server) forbidSendMsg(r request) reply {
	var req struct {
		GroupID    string   `json:"GroupId"`
		Members    []string `json:"Members_Account"`
		ShutUpTime *uint32  `json:"ShutUpTime"`
	}
	if rep, ok := r.decode(&req, "GroupId", "Members_Account", "ShutUpTime"); !ok {
		return rep
	}
	if rep, ok := members(req.Members, maxForbidMembers); !ok {
		return rep
	}
	if req.ShutUpTime == nil {
		return fail(10004, "invalid parameter: ShutUpTime is required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, rep, found := s.lookup(req.GroupID)
	if !found {
		return rep
	}
	for _, m := range req.Members {
		if *req.ShutUpTime == 0 {
			delete(g.muted, m)
			continue
		}
		g.muted[m] = r.now.Add(secondsDuration(*req.ShutUpTime))
	}
	s.saveLocked()
	return ok(nil)
}

func (s *Server) getGroupShuttedUin(r request) reply {
	var req struct {
		GroupID string `json:"GroupId"`
	}
	if rep, ok := r.decode(&req, "GroupId"); !ok {
		return rep
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, rep, found := s.lookup(req.GroupID)
	if !found {
		return rep
	}
	return ok(map[string]any{"GroupId": g.id, "ShuttedUinList": sortedAccounts(active(g.muted, r.now), "ShuttedUntil")})
}

func (s *Server) banGroupMember(r request) reply {
	var req struct {
		GroupID     string   `json:"GroupId"`
		Members     []string `json:"Members_Account"`
		Duration    uint32   `json:"Duration"`
		Description string   `json:"Description"`
	}
	if rep, ok := r.decode(&req, "GroupId", "Members_Account", "Duration", "Description"); !ok {
		return rep
	}
	if rep, ok := members(req.Members, maxBanMembers); !ok {
		return rep
	}
	switch {
	case req.Duration == 0:
		return fail(10004, "invalid parameter: Duration must be at least 1 second")
	case len(req.Description) > maxBanDescription:
		return fail(10004, "invalid parameter: Description is over %d bytes", maxBanDescription)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, rep, found := s.lookup(req.GroupID)
	if !found {
		return rep
	}
	for _, m := range req.Members {
		g.banned[m] = r.now.Add(secondsDuration(req.Duration))
	}
	s.saveLocked()
	return ok(nil)
}

func (s *Server) unbanGroupMember(r request) reply {
	var req struct {
		GroupID string   `json:"GroupId"`
		Members []string `json:"Members_Account"`
	}
	if rep, ok := r.decode(&req, "GroupId", "Members_Account"); !ok {
		return rep
	}
	if rep, ok := members(req.Members, maxBanMembers); !ok {
		return rep
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, rep, found := s.lookup(req.GroupID)
	if !found {
		return rep
	}
	for _, m := range req.Members {
		delete(g.banned, m)
	}
	s.saveLocked()
	return ok(nil)
}

func (s *Server) getGroupBanMember(r request) reply {
	var req struct {
		GroupID string `json:"GroupId"`
		Offset  uint32 `json:"Offset"`
		Limit   uint32 `json:"Limit"`
	}
	if rep, ok := r.decode(&req, "GroupId", "Offset", "Limit"); !ok {
		return rep
	}
	if req.Limit == 0 {
		req.Limit = maxBanListLimit
	}
	if req.Limit > maxBanListLimit {
		return fail(10004, "invalid parameter: Limit is over %d", maxBanListLimit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, rep, found := s.lookup(req.GroupID)
	if !found {
		return rep
	}
	all := sortedAccounts(active(g.banned, r.now), "BannedUntil")
	lo := min(int(req.Offset), len(all))
	hi := min(lo+int(req.Limit), len(all))
	next := 0 // 0 means the list is complete
	if hi < len(all) {
		next = hi
	}
	return ok(map[string]any{"BannedAccountList": all[lo:hi], "NextOffset": next})
}

// modifyGroupBaseInfo changes a group's profile. Name and ShutUpAllMember are kept; the other documented
// fields are checked and accepted without a model.
func (s *Server) modifyGroupBaseInfo(r request) reply {
	var req struct {
		GroupID         string            `json:"GroupId"`
		Name            *string           `json:"Name"`
		Introduction    string            `json:"Introduction"`
		Notification    string            `json:"Notification"`
		FaceURL         string            `json:"FaceUrl"`
		MaxMemberNum    uint32            `json:"MaxMemberNum"`
		ApplyJoinOption string            `json:"ApplyJoinOption"`
		InviteJoinOpt   string            `json:"InviteJoinOption"`
		ShutUpAllMember *string           `json:"ShutUpAllMember"`
		AppDefinedData  []json.RawMessage `json:"AppDefinedData"`
		FromAccount     string            `json:"From_Account"`
	}
	if rep, ok := r.decode(&req, "GroupId", "Name", "Introduction", "Notification", "FaceUrl", "MaxMemberNum",
		"ApplyJoinOption", "InviteJoinOption", "ShutUpAllMember", "AppDefinedData", "From_Account"); !ok {
		return rep
	}
	switch {
	case req.Name != nil && *req.Name == "":
		return fail(10004, "invalid parameter: Name must not be empty")
	case req.Name != nil && len(*req.Name) > maxNameLen:
		return fail(10004, "invalid parameter: Name is %d bytes, the limit is %d", len(*req.Name), maxNameLen)
	case req.Name != nil && !utf8.ValidString(*req.Name):
		return fail(10004, "invalid parameter: Name is not valid UTF-8")
	case len(req.Introduction) > maxIntroductionLen, len(req.Notification) > maxNotificationLen,
		len(req.FaceURL) > maxFaceURLLen:
		return fail(10004, "invalid parameter: Introduction, Notification or FaceUrl too long")
	case req.ShutUpAllMember != nil && *req.ShutUpAllMember != "On" && *req.ShutUpAllMember != "Off":
		return fail(10004, "invalid parameter: ShutUpAllMember %q is not On or Off", *req.ShutUpAllMember)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, rep, found := s.lookup(req.GroupID)
	if !found {
		return rep
	}
	if req.Name != nil {
		g.name = *req.Name
	}
	if req.ShutUpAllMember != nil {
		g.shutUpAll = *req.ShutUpAllMember == "On"
	}
	s.saveLocked()
	return ok(nil)
}

func secondsDuration(n uint32) time.Duration { return time.Duration(n) * time.Second }
