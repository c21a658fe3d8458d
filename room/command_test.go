package room

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// roundTripCommands are, for every command type, commands whose fields are
// all set (and, where a field is optional, also left unset).
func roundTripCommands() []Command {
	cmds := []Command{
		&JoinRoom{},
		&UpdateProfile{Notice: strp("")},
		&UpdateProfile{Title: strp("<b>&\"quoted\"</b>"), Notice: strp("公告\u2028line"), CoverURL: strp("https://img.example/c.png?a=1&b=2")},
		&KickUser{TargetUserID: uAlice},
		&MuteUser{TargetUserID: uAlice},
		&SetAdmin{TargetUserID: uAlice, Admin: false},
		&LockMicSeat{SeatIndex: 0, Locked: false},
		&MuteMicSeat{SeatIndex: MaxSeats - 1, Muted: true},
		&SetMyMic{On: true},
		&SetChatEnabled{Enabled: true},
		&ChangeBackground{},
		luckyCombo(),
		&SendGift{ReceiverUserIDs: []int64{uAlice}, GiftID: "g", Count: 1, Outcome: GiftOutcome{Price: 1, Kind: GiftNormal}},
		&LaunchRocket{},
	}
	for _, smp := range samples() {
		cmds = append(cmds, smp.cmd)
	}
	return cmds
}

// luckyCombo is a lucky gift with every field of the command and its outcome set.
func luckyCombo() *SendGift {
	return &SendGift{
		ReceiverUserIDs: []int64{uAlice, uBob, uAdmin2}, GiftID: "clover-7", Count: 99, ComboID: "combo-1",
		Outcome: GiftOutcome{
			Name: "幸运草 \"7\"", Price: 20, Kind: GiftLucky, ReceiversOnMic: false, RegionalThreshold: 100_000,
			LuckyRegionalMin: 50_000, MultiplierBP: 50 * BasisPoints, Reward: 297_000, ChargedAt: tNow - 3, BalanceAfter: 1_234_567,
		},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	seen := map[CommandType]bool{}
	for _, cmd := range roundTripCommands() {
		seen[cmd.Type()] = true
		for i, platform := range []bool{false, true} {
			in := &Envelope{RoomID: testRoomID, CommandID: "c-42", Operator: uAdmin, Platform: platform, At: tNow, Rev: i * Rev, Command: cmd}
			payload, err := EncodeCommand(in)
			if err != nil {
				t.Fatalf("encode %s: %v", cmd.Type(), err)
			}
			out, err := DecodeCommand(testRoomID, "c-42", cmd.Type(), payload)
			if err != nil {
				t.Fatalf("decode %s %s: %v", cmd.Type(), payload, err)
			}
			if !reflect.DeepEqual(in, out) {
				t.Errorf("%s round trip\n in: %+v %+v\nout: %+v %+v", cmd.Type(), *in, in.Command, *out, out.Command)
			}
			if !SameRequest(cmd.Type(), payload, out) {
				t.Errorf("%s: the decoded envelope is not the same request as its payload %s", cmd.Type(), payload)
			}
		}
	}
	for _, typ := range allCommandTypes {
		if !seen[typ] {
			t.Errorf("%s has no round-trip case", typ)
		}
	}
}

// A command logged without a body decodes to its zero value (CloseRoom and
// friends carry no fields).
func TestDecodeCommandWithoutBody(t *testing.T) {
	for _, payload := range []string{`{"op":1,"at":5}`, `{"op":1,"at":5,"body":null}`, `{"op":1,"at":5,"body":{}}`} {
		e, err := DecodeCommand(testRoomID, "c", CmdCloseRoom, []byte(payload))
		if err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		want := &Envelope{RoomID: testRoomID, CommandID: "c", Operator: 1, At: 5, Command: &CloseRoom{}}
		if !reflect.DeepEqual(e, want) {
			t.Errorf("%s: %+v", payload, *e)
		}
	}
}

func TestDecodeCommandRejects(t *testing.T) {
	valid := `{"op":5,"at":1700000000000,"body":{"seat_index":3}}`
	cases := []struct {
		name    string
		typ     CommandType
		payload string
		err     *Error
	}{
		{"unknown type", "FlyToTheMoon", valid, ErrUnknownCommand},
		{"empty type", "", valid, ErrUnknownCommand},
		{"type in another case", "takemic", valid, ErrUnknownCommand},
		{"empty payload", CmdTakeMic, ``, ErrInvalidArgument},
		{"truncated", CmdTakeMic, valid[:len(valid)-2], ErrInvalidArgument},
		{"not an object", CmdTakeMic, `[1,2]`, ErrInvalidArgument},
		{"a string", CmdTakeMic, `"TakeMic"`, ErrInvalidArgument},
		{"unknown envelope field", CmdTakeMic, `{"op":5,"at":1,"body":{},"room":"r"}`, ErrInvalidArgument},
		{"unknown body field", CmdTakeMic, `{"op":5,"at":1,"body":{"seat":3}}`, ErrInvalidArgument},
		{"field of another command", CmdTakeMic, `{"op":5,"at":1,"body":{"to_seat_index":3}}`, ErrInvalidArgument},
		{"body not an object", CmdTakeMic, `{"op":5,"at":1,"body":[3]}`, ErrInvalidArgument},
		{"body a string", CmdTakeMic, `{"op":5,"at":1,"body":"x"}`, ErrInvalidArgument},
		{"operator a string", CmdTakeMic, `{"op":"5","at":1,"body":{}}`, ErrInvalidArgument},
		{"seat a float", CmdTakeMic, `{"op":5,"at":1,"body":{"seat_index":1.5}}`, ErrInvalidArgument},
		{"seat overflows int32", CmdTakeMic, `{"op":5,"at":1,"body":{"seat_index":3000000000}}`, ErrInvalidArgument},
		{"platform a number", CmdTakeMic, `{"op":5,"at":1,"platform":1,"body":{}}`, ErrInvalidArgument},
		{"pointer field wrong type", CmdUpdateProfile, `{"op":5,"at":1,"body":{"title":7}}`, ErrInvalidArgument},
		{"trailing object", CmdTakeMic, valid + ` {}`, ErrInvalidArgument},
		{"trailing garbage", CmdTakeMic, valid + `x`, ErrInvalidArgument},
		{"trailing brace", CmdTakeMic, valid + `}`, ErrInvalidArgument},
		{"trailing bracket", CmdTakeMic, valid + `]`, ErrInvalidArgument},
		{"a rules revision of a later build", CmdTakeMic, fmt.Sprintf(`{"op":5,"at":1,"rev":%d,"body":{}}`, Rev+1), ErrInvalidArgument},
		{"a negative rules revision", CmdTakeMic, `{"op":5,"at":1,"rev":-1,"body":{}}`, ErrInvalidArgument},
		{"gift outcome on a command without one", CmdTakeMic, `{"op":5,"at":1,"body":{"seat_index":3},"gift":{"price":1}}`, ErrInvalidArgument},
		{"unknown gift outcome field", CmdSendGift, `{"op":5,"at":1,"body":{"gift_id":"g"},"gift":{"price":1,"colour":"red"}}`, ErrInvalidArgument},
		{"gift outcome not an object", CmdSendGift, `{"op":5,"at":1,"body":{"gift_id":"g"},"gift":[1]}`, ErrInvalidArgument},
		{"outcome field in the body", CmdSendGift, `{"op":5,"at":1,"body":{"gift_id":"g","price":1}}`, ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := DecodeCommand(testRoomID, "c", tc.typ, []byte(tc.payload))
			requireReason(t, err, tc.err)
			if e != nil {
				t.Errorf("envelope returned with the error: %+v", *e)
			}
		})
	}
	t.Run("the valid payload decodes", func(t *testing.T) {
		e, err := DecodeCommand(testRoomID, "c", CmdTakeMic, []byte(valid))
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := e.Command.(*TakeMic); !ok || c.SeatIndex != 3 || e.Operator != 5 || e.At != 1_700_000_000_000 {
			t.Fatalf("decoded %+v %+v", *e, e.Command)
		}
	})
}

func TestSameRequest(t *testing.T) {
	orig := &Envelope{RoomID: testRoomID, CommandID: "c-1", Operator: uAdmin, At: tNow,
		Command: &KickUser{TargetUserID: uAlice, DurationSeconds: 60}}
	stored, err := EncodeCommand(orig)
	if err != nil {
		t.Fatal(err)
	}
	retry := func(mod func(e *Envelope)) *Envelope {
		e := *orig
		e.Command = &KickUser{TargetUserID: uAlice, DurationSeconds: 60}
		mod(&e)
		return &e
	}
	cases := []struct {
		name string
		env  *Envelope
		same bool
	}{
		{"identical", retry(func(*Envelope) {}), true},
		{"same request later", retry(func(e *Envelope) { e.At = tNow + 3_600_000 }), true},
		{"same request by a later build", retry(func(e *Envelope) { e.Rev = Rev }), true},
		{"same request on another command id", retry(func(e *Envelope) { e.CommandID = "c-2" }), true},
		{"another operator", retry(func(e *Envelope) { e.Operator = uHost }), false},
		{"with the platform flag", retry(func(e *Envelope) { e.Platform = true }), false},
		{"another target", retry(func(e *Envelope) { e.Command = &KickUser{TargetUserID: uBob, DurationSeconds: 60} }), false},
		{"another duration", retry(func(e *Envelope) { e.Command = &KickUser{TargetUserID: uAlice} }), false},
		{"another type, same fields", retry(func(e *Envelope) { e.Command = &MuteUser{TargetUserID: uAlice, DurationSeconds: 60} }), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameRequest(CmdKickUser, stored, tc.env); got != tc.same {
				t.Fatalf("SameRequest = %t, want %t", got, tc.same)
			}
		})
	}
	t.Run("empty bodies of different types", func(t *testing.T) {
		p, err := EncodeCommand(env(uAlice, &LeaveMic{}))
		if err != nil {
			t.Fatal(err)
		}
		if !SameRequest(CmdLeaveMic, p, envAt(uAlice, tNow+1, &LeaveMic{})) {
			t.Error("LeaveMic retry does not match")
		}
		if SameRequest(CmdLeaveMic, p, env(uAlice, &LeaveRoom{})) {
			t.Error("LeaveRoom matches a stored LeaveMic")
		}
	})
	t.Run("unset and empty optional fields differ", func(t *testing.T) {
		p, err := EncodeCommand(env(uOwner, &UpdateProfile{Title: strp("t")}))
		if err != nil {
			t.Fatal(err)
		}
		if !SameRequest(CmdUpdateProfile, p, env(uOwner, &UpdateProfile{Title: strp("t")})) {
			t.Error("identical UpdateProfile does not match")
		}
		if SameRequest(CmdUpdateProfile, p, env(uOwner, &UpdateProfile{Title: strp("t"), Notice: strp("")})) {
			t.Error("clearing the notice matches a request that left it alone")
		}
	})
	t.Run("unreadable stored payload", func(t *testing.T) {
		for _, p := range []string{``, `{`, `[]`, strings.Repeat("x", 10)} {
			if SameRequest(CmdKickUser, []byte(p), orig) {
				t.Errorf("payload %q matches", p)
			}
		}
	})
}

// The outcome of a gift is logged beside the body: a retry carries the same
// request but not (yet) the outcome, and must still match.
func TestSameRequestIgnoresTheGiftOutcome(t *testing.T) {
	orig := env(uCarol, luckyCombo())
	stored, err := EncodeCommand(orig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stored), `"gift":{`) {
		t.Fatalf("the outcome is not logged: %s", stored)
	}
	retry := func(mod func(c *SendGift)) *Envelope {
		c := luckyCombo()
		mod(c)
		return envAt(uCarol, tNow+5000, c)
	}
	cases := []struct {
		name string
		env  *Envelope
		same bool
	}{
		{"another outcome", retry(func(c *SendGift) { c.Outcome = GiftOutcome{Price: 1, Kind: GiftNormal, BalanceAfter: 3} }), true},
		{"no outcome yet", retry(func(c *SendGift) { c.Outcome = GiftOutcome{} }), true},
		{"another count", retry(func(c *SendGift) { c.Count = 98 }), false},
		{"another combo", retry(func(c *SendGift) { c.ComboID = "combo-2" }), false},
		{"receivers in another order", retry(func(c *SendGift) { c.ReceiverUserIDs = []int64{uBob, uAlice, uAdmin2} }), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameRequest(CmdSendGift, stored, tc.env); got != tc.same {
				t.Fatalf("SameRequest = %t, want %t", got, tc.same)
			}
		})
	}
}

func TestRestoreOutcome(t *testing.T) {
	gift := luckyCombo()
	p, err := EncodeCommand(env(uCarol, gift))
	if err != nil {
		t.Fatal(err)
	}
	retry := &SendGift{ReceiverUserIDs: gift.ReceiverUserIDs, GiftID: gift.GiftID, Count: gift.Count, ComboID: gift.ComboID,
		Outcome: GiftOutcome{Name: "drawn again", MultiplierBP: 1}}
	if !RestoreOutcome(retry, p) || retry.Outcome != gift.Outcome {
		t.Fatalf("RestoreOutcome = %+v, want %+v", retry.Outcome, gift.Outcome)
	}
	other, err := EncodeCommand(env(uAlice, &LeaveMic{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{other, []byte(`{`), nil, []byte(`{"op":1,"at":1,"body":{},"gift":null}`)} {
		g := &SendGift{}
		if RestoreOutcome(g, p) || g.Outcome != (GiftOutcome{}) {
			t.Errorf("RestoreOutcome(%s) = true or changed the outcome: %+v", p, g.Outcome)
		}
	}
	if RestoreOutcome(&LeaveMic{}, p) {
		t.Error("RestoreOutcome restored an outcome into a command that records none")
	}
}
