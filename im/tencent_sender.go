package im

import (
	"context"
	"errors"
	"fmt"

	"hyapp/room-service/im/tencent"
)

// TencentSender sends lane messages with the Tencent IM REST client.
type TencentSender struct{ Client *tencent.Client }

var (
	_ Sender   = TencentSender{}
	_ GroupAPI = (*tencent.Client)(nil)
)

// Send implements Sender: one TIMCustomElem, Desc = the type, the lane's
// Random kept across the client's retries.
func (s TencentSender) Send(ctx context.Context, m Message) error {
	_, err := s.Client.SendGroupMsg(ctx, tencent.Msg{
		GroupID: m.GroupID, Random: m.Random, Priority: string(m.Priority), Desc: m.Type, Data: m.Data,
	})
	if errors.Is(err, tencent.ErrDropped) {
		return fmt.Errorf("%w: %w", ErrDropped, err)
	}
	return err
}
