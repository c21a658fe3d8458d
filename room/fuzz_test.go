package room

import (
	"errors"
	"testing"
)

// FuzzDecodeApply decodes an arbitrary command log row and applies it to a
// busy open room (with a day's economy), a closed room and a room still being created. Nothing may
// panic; a refusal must be an *Error that leaves the state exactly as it was;
// a success must move the version by one, keep the invariants of DESIGN 2.3
// and close every mic interval it ends exactly once; and an accepted command
// must survive another encode/decode round trip as the same request.
func FuzzDecodeApply(f *testing.F) {
	for _, cmd := range roundTripCommands() {
		for _, op := range []int64{uOwner, uAdmin, uAlice, uVisitor, SystemOperator} {
			for _, platform := range []bool{false, true} {
				e := &Envelope{RoomID: testRoomID, CommandID: "seed", Operator: op, Platform: platform, At: tNow, Command: cmd}
				p, err := EncodeCommand(e)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(string(cmd.Type()), p)
			}
		}
	}
	f.Add(string(CmdCloseRoom), []byte(`{"op":1,"at":0}`))
	f.Add(string(CmdKickUser), []byte(`{"op":3,"at":9223372036854775807,"body":{"target_user_id":5,"duration_seconds":1}}`))
	f.Add(string(CmdTakeMic), []byte(`{"op":7,"at":-1,"body":{"seat_index":19}}`))
	f.Add("SendGift", []byte(`{"op":1,"at":1,"body":{}}`))
	f.Add(string(CmdSendGift), []byte(`{"op":7,"at":1700006400000,"body":{"receiver_user_ids":[5,4],"gift_id":"car","count":9999},"gift":{"name":"Car","price":100000000000,"kind":"lucky","on_mic":true,"reward":5}}`))
	f.Add(string(CmdSendGift), []byte(`{"op":7,"at":1700000010000,"body":{"receiver_user_ids":[4],"gift_id":"ship","count":1},"gift":{"name":"Ship","price":1000000000,"kind":"normal"}}`))
	f.Add(string(CmdLaunchRocket), []byte(`{"op":9223372036854775807,"platform":true,"at":1700006400000,"body":{"rocket_id":1,"level":0,"launch_at":1700000010000,"day":19675}}`))

	states := []func() *State{fixture, closedFixture, creatingFixture}
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		e, err := DecodeCommand(testRoomID, "fuzz-1", CommandType(typ), payload)
		if err != nil {
			if e != nil {
				t.Fatalf("DecodeCommand returned an envelope with %v", err)
			}
			if !errors.Is(err, ErrUnknownCommand) && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("DecodeCommand error %v is neither unknown_command nor invalid_argument", err)
			}
			return
		}
		if e.Command == nil || e.Command.Type() != CommandType(typ) {
			t.Fatalf("decoded %s as %v", typ, e.Command)
		}
		for _, mk := range states {
			s := mk()
			// Apply twice: the second sees the state the first left.
			for range 2 {
				before := cloneState(s)
				events, err := Apply(s, e)
				if err != nil {
					var de *Error
					if !errors.As(err, &de) || de.Code == CodeInternal {
						t.Fatalf("Apply error %#v is not a domain refusal", err)
					}
					if events != nil {
						t.Fatalf("refused %s returned events", typ)
					}
					requireUnchanged(t, before, s)
					continue
				}
				checkSuccess(t, before, s, e, events)
				again, err := EncodeCommand(e)
				if err != nil {
					t.Fatalf("re-encode %s: %v", typ, err)
				}
				if !SameRequest(e.Command.Type(), again, e) {
					t.Fatalf("%s re-encoded as %s is not the same request", typ, again)
				}
				back, err := DecodeCommand(testRoomID, "fuzz-1", e.Command.Type(), again)
				if err != nil {
					t.Fatalf("re-decode %s %s: %v", typ, again, err)
				}
				if err := back.Validate(); err != nil {
					t.Fatalf("accepted %s no longer validates after a round trip: %v", typ, err)
				}
			}
		}
	})
}
