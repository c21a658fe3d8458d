package gift_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"hyapp/room-service/gift"
	"hyapp/room-service/room"
)

func defaults(t *testing.T) *gift.Catalogue {
	t.Helper()
	c, err := gift.New(gift.DefaultGifts(), gift.Settings{Lucky: gift.DefaultLucky(), MaxPayoutBP: 9500, RegionalThreshold: 10_000, LuckyRegionalThreshold: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSampleCatalogueLoads(t *testing.T) {
	c := defaults(t)
	if got := c.ExpectedPayoutBP(); got != 9250 {
		t.Fatalf("expected payout %d bp, want 9250 (the table's weighted mean)", got)
	}
	normal, lucky := 0, 0
	for _, g := range c.Gifts() {
		switch g.Kind {
		case room.GiftNormal:
			normal++
		case room.GiftLucky:
			lucky++
		}
	}
	if normal == 0 || lucky == 0 {
		t.Fatalf("sample catalogue has %d normal and %d lucky gifts; want both", normal, lucky)
	}
}

func TestLuckyTableOverTargetIsRefused(t *testing.T) {
	_, err := gift.New(gift.DefaultGifts(), gift.Settings{Lucky: gift.DefaultLucky(), MaxPayoutBP: 9249})
	if err == nil || !strings.Contains(err.Error(), "expected payout 9250 bp") {
		t.Fatalf("a table paying 9250 bp against a 9249 cap: %v", err)
	}
	// Exactly at the cap is allowed.
	if _, err := gift.New(gift.DefaultGifts(), gift.Settings{Lucky: gift.DefaultLucky(), MaxPayoutBP: 9250}); err != nil {
		t.Fatal(err)
	}
}

func TestBadCatalogueReportsEveryProblem(t *testing.T) {
	gifts := []gift.Gift{
		{ID: "", Name: "x", Price: 1, Kind: room.GiftNormal, Counts: []int32{1}},
		{ID: "a", Name: "A", Price: 0, Kind: room.GiftNormal, Counts: []int32{1}},
		{ID: "a", Name: "A", Price: 1, Kind: "rare", Counts: nil},
		{ID: "b", Name: "B", Price: 1, Kind: room.GiftLucky, Counts: []int32{0}},
	}
	_, err := gift.New(gifts, gift.Settings{Lucky: []gift.Outcome{{Multiplier: 0.12345, Weight: 1}, {Multiplier: 1, Weight: 0}}, MaxPayoutBP: 10_000})
	if err == nil {
		t.Fatal("a broken catalogue loaded")
	}
	for _, want := range []string{"id must be", "price 0", "duplicate id", "kind \"rare\"", "counts is empty", "count 0", "4 decimals", "weight 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if _, err := gift.New(gifts[3:], gift.Settings{MaxPayoutBP: 10_000}); err == nil || !strings.Contains(err.Error(), "lucky_table is empty") {
		t.Fatalf("lucky gift without a table: %v", err)
	}
}

func TestPrepare(t *testing.T) {
	c := defaults(t)
	g := &room.SendGift{GiftID: "nope", Count: 1}
	if err := c.Prepare(g); !errors.Is(err, room.ErrUnknownGift) {
		t.Fatalf("unknown gift: %v", err)
	}
	g = &room.SendGift{GiftID: "heart", Count: 8}
	if err := c.Prepare(g); !errors.Is(err, room.ErrCountNotAllowed) {
		t.Fatalf("count not allowed: %v", err)
	}
	g = &room.SendGift{GiftID: "heart", Count: 7}
	if err := c.Prepare(g); err != nil {
		t.Fatal(err)
	}
	if o := g.Outcome; o.Price != 10 || o.Kind != room.GiftNormal || !o.ReceiversOnMic || o.MultiplierBP != 0 || o.RegionalThreshold != 10_000 {
		t.Fatalf("heart outcome %+v", o)
	}
	g = &room.SendGift{GiftID: "castle", Count: 1}
	if err := c.Prepare(g); err != nil || g.Outcome.ReceiversOnMic {
		t.Fatalf("castle goes to anyone in the room: %+v %v", g.Outcome, err)
	}
}

// TestLuckyDrawFollowsTheTable draws many times and checks every multiplier
// comes from the table and the misses are about as common as their weight.
func TestLuckyDrawFollowsTheTable(t *testing.T) {
	c := defaults(t)
	allowed := map[int64]bool{}
	for _, o := range gift.DefaultLucky() {
		allowed[int64(o.Multiplier*room.BasisPoints)] = true
	}
	const n = 20_000
	misses := 0
	for range n {
		g := &room.SendGift{GiftID: "lucky_clover", Count: 1}
		if err := c.Prepare(g); err != nil {
			t.Fatal(err)
		}
		if !allowed[g.Outcome.MultiplierBP] {
			t.Fatalf("drew %d bp, not in the table", g.Outcome.MultiplierBP)
		}
		if g.Outcome.MultiplierBP == 0 {
			misses++
		}
	}
	// The miss weight is 5501/10000; 20,000 draws put the count within
	// 0.55 +- 0.03 with overwhelming probability (about 8.5 standard deviations).
	if f := float64(misses) / n; f < 0.52 || f > 0.58 {
		t.Fatalf("miss share %.3f, table says 0.55", f)
	}
}

// TestANaNMultiplierIsRefused: a lucky row whose multiplier is not a
// number (YAML's .nan) is refused like any other bad multiplier. Taken,
// it entered the expected payout as the lowest int64 and hid what the
// other rows pay: here a table paying back 5,000x per coin passed a 95%
// cap.
func TestANaNMultiplierIsRefused(t *testing.T) {
	lucky := []gift.Outcome{{Multiplier: math.NaN(), Weight: 1}, {Multiplier: 10_000, Weight: 1}}
	_, err := gift.New(gift.DefaultGifts(), gift.Settings{Lucky: lucky, MaxPayoutBP: 9500})
	if err == nil || !strings.Contains(err.Error(), "lucky_table[0]: multiplier NaN") {
		t.Fatalf("a NaN multiplier beside a 10,000x row: %v, want lucky_table[0] refused", err)
	}
}
