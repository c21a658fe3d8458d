package tencent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// Message priorities accepted by send_group_msg (case-sensitive). When a group is over 40 messages/s,
// Tencent keeps higher priorities first and silently drops the rest.
const (
	PriorityHigh   = "High"
	PriorityNormal = "Normal"
	PriorityLow    = "Low"
)

// Per-request limits documented by Tencent.
const (
	maxForbidMembers = 500 // forbid_send_msg Members_Account
	maxBanMembers    = 20  // ban_group_member / unban_group_member Members_Account
	maxGroupName     = 30  // bytes
	maxGroupIDLen    = 48  // bytes, custom group IDs
	maxBanReason     = 1000
	autoGroupPrefix  = "@TGS#" // reserved for IDs Tencent assigns
	avChatRoom       = "AVChatRoom"
	customElem       = "TIMCustomElem"
)

// Msg is one room event sent to a group as a single TIMCustomElem.
type Msg struct {
	// GroupID is the target group.
	GroupID string
	// Random identifies the message for Tencent's duplicate check: a message with the Random of one sent
	// in the last 5 minutes is discarded. Give each event its own stable value so a re-send after a crash
	// is a duplicate too; zero makes SendGroupMsg pick one (kept across its own retries).
	Random uint32
	// Priority is PriorityHigh, PriorityNormal or PriorityLow; empty means Normal.
	Priority string
	// Desc is the element's Desc (push text); optional.
	Desc string
	// Data is the element's Data: the JSON document clients parse. It must be valid UTF-8.
	Data []byte
	// FromAccount is the sender shown to clients; empty means the admin identifier.
	FromAccount string
}

// CreateGroup creates the AVChatRoom group groupID. A group that already exists counts as success, so a
// retried or repeated create is harmless. name is required by Tencent and cosmetic here: empty means
// groupID, and a name over 30 bytes is cut at a UTF-8 boundary rather than refused.
// Errors: ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) CreateGroup(ctx context.Context, groupID, name string) error {
	if err := checkCustomGroupID(groupID); err != nil {
		return fmt.Errorf("create group group=%q: %w: %w", groupID, ErrInvalid, err)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("create group group=%s: %w: name is not valid UTF-8", groupID, ErrInvalid)
	}
	if name == "" {
		name = groupID
	}
	req := struct {
		Type    string `json:"Type"`
		GroupID string `json:"GroupId"`
		Name    string `json:"Name"`
	}{avChatRoom, groupID, truncateUTF8(name, maxGroupName)}
	err := c.call(ctx, groupService, "create_group", req, nil)
	if errors.Is(err, ErrGroupExists) {
		return nil
	}
	if errors.Is(err, ErrGroupNotFound) {
		// 10015 (invalid group ID) to a create: the id itself is refused.
		return fmt.Errorf("create group group=%s: %w: %w", groupID, ErrInvalid, err)
	}
	if err != nil {
		return fmt.Errorf("create group group=%s: %w", groupID, err)
	}
	return nil
}

// RenameGroup sets groupID's name (modify_group_base_info Name). A name over Tencent's 30 bytes is cut at a
// UTF-8 boundary; an empty name or one that is not valid UTF-8 is refused before any call.
// Errors: ErrInvalid, ErrGroupNotFound, ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) RenameGroup(ctx context.Context, groupID, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("rename group group=%s: %w: empty name", groupID, ErrInvalid)
	case !utf8.ValidString(name):
		return fmt.Errorf("rename group group=%s: %w: name is not valid UTF-8", groupID, ErrInvalid)
	}
	req := struct {
		GroupID string `json:"GroupId"`
		Name    string `json:"Name"`
	}{groupID, truncateUTF8(name, maxGroupName)}
	return c.modifyGroup(ctx, "rename group", groupID, req)
}

// ShutUpAllMember mutes (on) or unmutes every member of groupID (modify_group_base_info ShutUpAllMember
// "On"/"Off"): while on, only the owner, group admins and App admins can send; REST sends as the admin
// still go through. Setting the state the group already has succeeds.
// Errors: ErrInvalid, ErrGroupNotFound, ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) ShutUpAllMember(ctx context.Context, groupID string, on bool) error {
	state := "Off"
	if on {
		state = "On"
	}
	req := struct {
		GroupID         string `json:"GroupId"`
		ShutUpAllMember string `json:"ShutUpAllMember"`
	}{groupID, state}
	return c.modifyGroup(ctx, "shut up all member "+state, groupID, req)
}

func (c *Client) modifyGroup(ctx context.Context, what, groupID string, req any) error {
	if groupID == "" {
		return fmt.Errorf("%s: %w: empty group id", what, ErrInvalid)
	}
	if err := c.call(ctx, groupService, "modify_group_base_info", req, nil); err != nil {
		return fmt.Errorf("%s group=%s: %w", what, groupID, err)
	}
	return nil
}

// DestroyGroup dissolves groupID. A group that does not exist counts as success.
// Errors: ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) DestroyGroup(ctx context.Context, groupID string) error {
	if groupID == "" {
		return fmt.Errorf("destroy group: %w: empty group id", ErrInvalid)
	}
	req := struct {
		GroupID string `json:"GroupId"`
	}{groupID}
	err := c.call(ctx, groupService, "destroy_group", req, nil)
	if errors.Is(err, ErrGroupNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy group group=%s: %w", groupID, err)
	}
	return nil
}

type msgContent struct {
	Data string `json:"Data"`
	Desc string `json:"Desc,omitempty"`
}

type msgElem struct {
	MsgType    string     `json:"MsgType"`
	MsgContent msgContent `json:"MsgContent"`
}

// SendGroupMsg sends m as one TIMCustomElem and returns the MsgSeq Tencent assigned. Every attempt carries
// the same Random, so a retry after a lost answer is discarded by Tencent as a duplicate.
//
// A success answer with MsgDropReason returns the MsgSeq and an error wrapping ErrDropped: the group was
// over its 40 messages/s and this message was neither delivered nor stored.
// Errors: ErrGroupNotFound, ErrTooLarge, ErrDropped, ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) SendGroupMsg(ctx context.Context, m Msg) (uint64, error) {
	if m.GroupID == "" {
		return 0, fmt.Errorf("send group msg: %w: empty group id", ErrInvalid)
	}
	switch m.Priority {
	case "":
		m.Priority = PriorityNormal
	case PriorityHigh, PriorityNormal, PriorityLow:
	default:
		return 0, fmt.Errorf("send group msg group=%s: %w: priority %q is not High, Normal or Low", m.GroupID, ErrInvalid, m.Priority)
	}
	// encoding/json would silently replace invalid bytes with U+FFFD, corrupting the payload.
	if !utf8.Valid(m.Data) || !utf8.ValidString(m.Desc) {
		return 0, fmt.Errorf("send group msg group=%s: %w: data and desc must be valid UTF-8", m.GroupID, ErrInvalid)
	}
	for m.Random == 0 {
		m.Random = rand.Uint32()
	}
	req := struct {
		GroupID     string    `json:"GroupId"`
		Random      uint32    `json:"Random"`
		MsgPriority string    `json:"MsgPriority"`
		FromAccount string    `json:"From_Account,omitempty"`
		MsgBody     []msgElem `json:"MsgBody"`
	}{
		GroupID:     m.GroupID,
		Random:      m.Random,
		MsgPriority: m.Priority,
		FromAccount: m.FromAccount,
		MsgBody:     []msgElem{{MsgType: customElem, MsgContent: msgContent{Data: string(m.Data), Desc: m.Desc}}},
	}
	var resp struct {
		MsgSeq        uint64
		MsgTime       int64
		MsgDropReason string
	}
	if err := c.call(ctx, groupService, "send_group_msg", req, &resp); err != nil {
		return 0, fmt.Errorf("send group msg group=%s random=%d: %w", m.GroupID, m.Random, err)
	}
	if resp.MsgDropReason != "" {
		return resp.MsgSeq, fmt.Errorf("send group msg group=%s random=%d seq=%d: %w (%s)",
			m.GroupID, m.Random, resp.MsgSeq, ErrDropped, resp.MsgDropReason)
	}
	return resp.MsgSeq, nil
}

// ForbidSendMsg mutes members in groupID for seconds; 0 unmutes and 4294967295 mutes for good. Members go
// in requests of at most 500; if one fails, the earlier ones stay applied and the error names the range.
// Errors: ErrGroupNotFound, ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) ForbidSendMsg(ctx context.Context, groupID string, members []string, seconds uint32) error {
	return chunked(members, maxForbidMembers, func(lo, hi int) error {
		req := struct {
			GroupID    string   `json:"GroupId"`
			Members    []string `json:"Members_Account"`
			ShutUpTime uint32   `json:"ShutUpTime"`
		}{groupID, members[lo:hi], seconds}
		if err := c.call(ctx, groupService, "forbid_send_msg", req, nil); err != nil {
			return fmt.Errorf("forbid send msg group=%s members %d-%d of %d: %w", groupID, lo, hi, len(members), err)
		}
		return nil
	})
}

// BanGroupMember bans members from groupID for seconds (at least 1): they are removed, receive nothing
// and cannot rejoin until it ends. reason is cut to 1000 bytes. Members go in requests of at most 20;
// if one fails, the earlier ones stay applied and the error names the range. Banning needs a plan and
// console switch on Tencent's side.
// Errors: ErrGroupNotFound, ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) BanGroupMember(ctx context.Context, groupID string, members []string, seconds uint32, reason string) error {
	if seconds == 0 {
		return fmt.Errorf("ban group member group=%s: %w: zero duration (use UnbanGroupMember to lift a ban)", groupID, ErrInvalid)
	}
	reason = truncateUTF8(reason, maxBanReason)
	return chunked(members, maxBanMembers, func(lo, hi int) error {
		req := struct {
			GroupID     string   `json:"GroupId"`
			Members     []string `json:"Members_Account"`
			Duration    uint32   `json:"Duration"`
			Description string   `json:"Description,omitempty"`
		}{groupID, members[lo:hi], seconds, reason}
		if err := c.call(ctx, groupService, "ban_group_member", req, nil); err != nil {
			return fmt.Errorf("ban group member group=%s members %d-%d of %d: %w", groupID, lo, hi, len(members), err)
		}
		return nil
	})
}

// UnbanGroupMember lifts the ban on members in groupID, in requests of at most 20.
// Errors: ErrGroupNotFound, ErrSignature, ErrRateLimited, ErrTransient, or an *APIError.
func (c *Client) UnbanGroupMember(ctx context.Context, groupID string, members []string) error {
	return chunked(members, maxBanMembers, func(lo, hi int) error {
		req := struct {
			GroupID string   `json:"GroupId"`
			Members []string `json:"Members_Account"`
		}{groupID, members[lo:hi]}
		if err := c.call(ctx, groupService, "unban_group_member", req, nil); err != nil {
			return fmt.Errorf("unban group member group=%s members %d-%d of %d: %w", groupID, lo, hi, len(members), err)
		}
		return nil
	})
}

// chunked calls fn for consecutive ranges [lo, hi) of at most size items, stopping at the first error.
func chunked(items []string, size int, fn func(lo, hi int) error) error {
	for lo := 0; lo < len(items); lo += size {
		if err := fn(lo, min(lo+size, len(items))); err != nil {
			return err
		}
	}
	return nil
}

// checkCustomGroupID applies Tencent's rules for caller-chosen group IDs.
func checkCustomGroupID(id string) error {
	switch {
	case id == "":
		return errors.New("empty group id")
	case len(id) > maxGroupIDLen:
		return fmt.Errorf("group id is %d bytes, the limit is %d", len(id), maxGroupIDLen)
	case strings.HasPrefix(id, autoGroupPrefix):
		return fmt.Errorf("group id must not start with %s", autoGroupPrefix)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return errors.New("group id must be printable ASCII")
		}
	}
	return nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
