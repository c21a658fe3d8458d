package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// method calls one RPC with a protojson request and returns the response.
type method func(ctx context.Context, reqJSON []byte) (proto.Message, error)

// bind turns a generated client method into a method: it parses the request
// into a fresh Req and hands back the response message.
func bind[Req, Resp any, PReq interface {
	*Req
	proto.Message
}, PResp interface {
	*Resp
	proto.Message
}](call func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) method {
	return func(ctx context.Context, reqJSON []byte) (proto.Message, error) {
		req := PReq(new(Req))
		if err := protojson.Unmarshal(reqJSON, req); err != nil {
			return nil, usagef("parse %s: %v", req.ProtoReflect().Descriptor().FullName(), err)
		}
		resp, err := call(ctx, connect.NewRequest((*Req)(req)))
		if err != nil {
			return nil, err
		}
		return PResp(resp.Msg), nil
	}
}

// methods is the dispatch table of "roomctl call": every RPC of both
// services by its method name.
func methods(c *client) map[string]method {
	r, o, w := c.rooms, c.ops, c.wallets
	return map[string]method{
		"CreateRoom":          bind(r.CreateRoom),
		"CloseRoom":           bind(r.CloseRoom),
		"JoinRoom":            bind(r.JoinRoom),
		"LeaveRoom":           bind(r.LeaveRoom),
		"TakeMic":             bind(r.TakeMic),
		"LeaveMic":            bind(r.LeaveMic),
		"MoveMic":             bind(r.MoveMic),
		"KickFromMic":         bind(r.KickFromMic),
		"LockMicSeat":         bind(r.LockMicSeat),
		"MuteMicSeat":         bind(r.MuteMicSeat),
		"SetMyMic":            bind(r.SetMyMic),
		"KickUser":            bind(r.KickUser),
		"MuteUser":            bind(r.MuteUser),
		"UnbanUser":           bind(r.UnbanUser),
		"SetAdmin":            bind(r.SetAdmin),
		"UpdateProfile":       bind(r.UpdateProfile),
		"ChangeBackground":    bind(r.ChangeBackground),
		"SetChatEnabled":      bind(r.SetChatEnabled),
		"SendGift":            bind(r.SendGift),
		"ListGifts":           bind(r.ListGifts),
		"GetRoomSnapshot":     bind(r.GetRoomSnapshot),
		"ListRooms":           bind(r.ListRooms),
		"ListCommands":        bind(o.ListCommands),
		"GetStoredSnapshot":   bind(o.GetStoredSnapshot),
		"GetOutboxStatus":     bind(o.GetOutboxStatus),
		"RequeueDeadOutbox":   bind(o.RequeueDeadOutbox),
		"CreditCoins":         bind(w.CreditCoins),
		"GetBalance":          bind(w.GetBalance),
		"Heartbeat":           bind(r.Heartbeat),
		"ListMembers":         bind(r.ListMembers),
		"ListGiftRecords":     bind(r.ListGiftRecords),
		"ListWalletEntries":   bind(w.ListWalletEntries),
		"PublishRobotDisplay": bind(r.PublishRobotDisplay),
		"ListNodes":           bind(o.ListNodes),
		"Drain":               bind(o.Drain),
		"SetMicApproval":      bind(r.SetMicApproval),
		"RequestMic":          bind(r.RequestMic),
		"CancelMicRequest":    bind(r.CancelMicRequest),
		"ApproveMicRequest":   bind(r.ApproveMicRequest),
		"RejectMicRequest":    bind(r.RejectMicRequest),
		"InviteToMic":         bind(r.InviteToMic),
		"AcceptMicInvite":     bind(r.AcceptMicInvite),
		"DeclineMicInvite":    bind(r.DeclineMicInvite),
		"TransferOwnership":   bind(r.TransferOwnership),
		"SetHost":             bind(r.SetHost),
	}
}

func setupCall(*flag.FlagSet) func(context.Context, *client, []string, io.Writer) error {
	return func(ctx context.Context, c *client, args []string, out io.Writer) error {
		table := methods(c)
		m, ok := table[args[0]]
		if !ok {
			return usagef("unknown method %q; valid methods: %s",
				args[0], strings.Join(slices.Sorted(maps.Keys(table)), ", "))
		}
		reqJSON := "{}"
		if len(args) > 1 {
			reqJSON = args[1]
		}
		resp, err := m(ctx, []byte(reqJSON))
		if err != nil {
			return fmt.Errorf("call %s: %w", args[0], err)
		}
		return printJSON(out, resp)
	}
}

// printer renders messages for people: indented, with the proto field names
// the requests are written in, and zero values shown (an empty seat is user_id 0).
var printer = protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}

func printJSON(out io.Writer, m proto.Message) error {
	b, err := printer.Marshal(m)
	if err != nil {
		return fmt.Errorf("render %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
