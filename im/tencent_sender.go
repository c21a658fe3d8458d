package im

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"hyapp/room-service/im/tencent"
)

// TencentSender sends lane messages with the Tencent IM REST client.
type TencentSender struct{ Client *tencent.Client }

// TencentGroups is GroupAPI on the Tencent IM REST client: the client's
// calls, with its errors told apart as GroupAPI promises (ErrGroupNotFound,
// *PermanentError).
type TencentGroups struct{ Client *tencent.Client }

var (
	_ Sender   = TencentSender{}
	_ GroupAPI = TencentGroups{}
	_ Sender   = RecreatingSender{}
)

// Send implements Sender: one TIMCustomElem, Desc = the type, with the
// lane's Random. The client makes one call (send_group_msg is Paced where
// the daemon wires it, so each call is one the lane's budget granted); the
// lane sends a failed message again itself, with the same Random.
func (s TencentSender) Send(ctx context.Context, m Message) error {
	_, err := s.Client.SendGroupMsg(ctx, tencent.Msg{
		GroupID: m.GroupID, Random: m.Random, Priority: string(m.Priority), Desc: m.Type, Data: m.Data,
	})
	switch {
	case errors.Is(err, tencent.ErrDropped):
		return fmt.Errorf("%w: %w", ErrDropped, err)
	case errors.Is(err, tencent.ErrRateLimited):
		return fmt.Errorf("%w: %w", ErrRateLimited, err)
	}
	return tencentError(err)
}

// CreateGroup implements GroupAPI.
func (g TencentGroups) CreateGroup(ctx context.Context, groupID, name string) error {
	return tencentError(g.Client.CreateGroup(ctx, groupID, name))
}

// DestroyGroup implements GroupAPI.
func (g TencentGroups) DestroyGroup(ctx context.Context, groupID string) error {
	return tencentError(g.Client.DestroyGroup(ctx, groupID))
}

// RenameGroup implements GroupAPI.
func (g TencentGroups) RenameGroup(ctx context.Context, groupID, name string) error {
	return tencentError(g.Client.RenameGroup(ctx, groupID, name))
}

// ShutUpAllMember implements GroupAPI.
func (g TencentGroups) ShutUpAllMember(ctx context.Context, groupID string, on bool) error {
	return tencentError(g.Client.ShutUpAllMember(ctx, groupID, on))
}

// ForbidSendMsg implements GroupAPI.
func (g TencentGroups) ForbidSendMsg(ctx context.Context, groupID string, members []string, seconds uint32) error {
	return tencentError(g.Client.ForbidSendMsg(ctx, groupID, members, seconds))
}

// BanGroupMember implements GroupAPI.
func (g TencentGroups) BanGroupMember(ctx context.Context, groupID string, members []string, seconds uint32, reason string) error {
	return tencentError(g.Client.BanGroupMember(ctx, groupID, members, seconds, reason))
}

// UnbanGroupMember implements GroupAPI.
func (g TencentGroups) UnbanGroupMember(ctx context.Context, groupID string, members []string) error {
	return tencentError(g.Client.UnbanGroupMember(ctx, groupID, members))
}

// tencentError tells a Tencent client error apart: permanent (invalid
// request, too large: tencent.Permanent) or group not found; other errors,
// transient ones among them, pass as they are.
func tencentError(err error) error {
	switch {
	case err == nil:
		return nil
	case tencent.Permanent(err):
		return permanent(tencent.Reason(err), err)
	case errors.Is(err, tencent.ErrGroupNotFound):
		return fmt.Errorf("%w: %w", ErrGroupNotFound, err)
	}
	return err
}

// GroupCreator creates a room's group (an existing group is success), and
// dissolves one (a missing group is success).
type GroupCreator interface {
	CreateGroup(ctx context.Context, groupID, name string) error
	DestroyGroup(ctx context.Context, groupID string) error
}

// RecreatingSender is the lane's Sender when groups can go missing (a
// dissolved group, a local endpoint restarted without its state): a send
// that finds its group missing creates the group (an AVChatRoom named after
// the room until group control renames it on the next title change) and
// sends once more, with the same Random. No message of a closed room
// recreates its group, whether it carries the RoomClosed or only comes
// after it (a coalesced value due later, a message that waited for its
// worker or for Tencent's answer as the room closed): the group is
// dissolved on purpose, and one made again would outlive the room.
type RecreatingSender struct {
	Sender Sender
	Groups GroupCreator
	// Recreated counts groups created again (nil: not counted).
	Recreated func()
}

// closedMark is how a RoomClosed event shows in a message's Data, alone or
// inside a Batch; JSON escapes the quotes of any string value, so no text
// field can imitate it.
var closedMark = []byte(`"type":"RoomClosed"`)

// Send implements Sender.
func (s RecreatingSender) Send(ctx context.Context, m Message) error {
	err := s.Sender.Send(ctx, m)
	if !errors.Is(err, ErrGroupNotFound) || m.closed || m.roomClosed != nil && m.roomClosed() || bytes.Contains(m.Data, closedMark) {
		return err
	}
	if cerr := s.Groups.CreateGroup(ctx, m.GroupID, m.RoomID); cerr != nil {
		return fmt.Errorf("send room=%s: recreate group: %w (send: %w)", m.RoomID, cerr, err)
	}
	if m.roomClosed != nil && m.roomClosed() {
		// The room closed while the group was made (group control may have
		// made and dissolved it meanwhile, before this create landed):
		// dissolve it again and send nothing.
		if derr := s.Groups.DestroyGroup(ctx, m.GroupID); derr != nil {
			return fmt.Errorf("send room=%s: dissolve the group made again as the room closed: %w (send: %w)", m.RoomID, derr, err)
		}
		return err
	}
	if s.Recreated != nil {
		s.Recreated()
	}
	return s.Sender.Send(ctx, m)
}
