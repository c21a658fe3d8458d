// Package gift is the gift catalogue: what each gift costs, how it may be
// sent, and the lucky table lucky gifts draw from. It is read-only after
// configuration loads; a send takes its facts from here and records them in
// the command, so a later catalogue change never alters replay.
package gift

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"

	"hyapp/room-service/room"
)

// Gift is one catalogue entry as configured.
type Gift struct {
	ID    string `yaml:"id"`
	Name  string `yaml:"name"`
	Price int64  `yaml:"price"` // COIN per piece
	Kind  string `yaml:"kind"`  // normal | lucky
	// Counts are the pieces per receiver a send may use.
	Counts []int32 `yaml:"counts"`
	// AnyReceiver lets the gift go to anyone in the room; by default receivers must be on a mic seat.
	AnyReceiver bool `yaml:"any_receiver"`
	// RegionalThreshold is the send value from which the gift also shows in
	// the room region's broadcast group; 0 takes the service default.
	RegionalThreshold int64 `yaml:"regional_threshold"`
}

// Outcome is one row of the lucky table: a multiplier of the spend paid
// back, and its weight among the rows.
type Outcome struct {
	Multiplier float64 `yaml:"multiplier"` // 0.5 pays half the spend back; 0 is a miss
	Weight     int64   `yaml:"weight"`
}

// Limits of a catalogue.
const (
	MaxGifts      = 1000
	MaxPrice      = 100_000_000
	MaxOutcomes   = 100
	MaxMultiplier = 10_000 // x
)

// Catalogue is the validated, read-only gift catalogue.
type Catalogue struct {
	gifts    []Gift
	byID     map[string]*Gift
	lucky    []luckyRow
	total    int64
	expected int64 // basis points paid back per coin spent
	// luckyRegionalMin is the reward from which a lucky win shows regionally.
	luckyRegionalMin int64
}

type luckyRow struct {
	bp, cumulative int64
}

// Settings are what New needs besides the gifts.
type Settings struct {
	// Lucky is the lucky table; required when a lucky gift exists.
	Lucky []Outcome
	// MaxPayoutBP caps the lucky table's expected payout per coin spent (basis points).
	MaxPayoutBP int64
	// RegionalThreshold is the default send value for regional display.
	RegionalThreshold int64
	// LuckyRegionalThreshold is the reward from which a lucky win shows regionally (0: never).
	LuckyRegionalThreshold int64
}

// New validates the gifts and the lucky table and reports every problem at
// once; a lucky table paying back more than MaxPayoutBP is refused.
func New(gifts []Gift, s Settings) (*Catalogue, error) {
	var p []error
	c := &Catalogue{byID: make(map[string]*Gift, len(gifts)), luckyRegionalMin: s.LuckyRegionalThreshold}
	if len(gifts) > MaxGifts {
		p = append(p, fmt.Errorf("gifts: %d entries, at most %d", len(gifts), MaxGifts))
	}
	lucky := false
	seen := make(map[string]bool, len(gifts))
	for i, g := range gifts {
		where := fmt.Sprintf("gifts[%d] (%s)", i, g.ID)
		if !validID(g.ID) {
			p = append(p, fmt.Errorf("%s: id must be 1..%d printable ASCII bytes without spaces", where, room.MaxIDLen))
		}
		if seen[g.ID] {
			p = append(p, fmt.Errorf("%s: duplicate id", where))
		}
		seen[g.ID] = true
		if g.Name == "" || len(g.Name) > room.MaxShortText {
			p = append(p, fmt.Errorf("%s: name must be 1..%d bytes", where, room.MaxShortText))
		}
		if g.Price <= 0 || g.Price > MaxPrice {
			p = append(p, fmt.Errorf("%s: price %d is outside 1..%d", where, g.Price, MaxPrice))
		}
		switch g.Kind {
		case room.GiftNormal:
		case room.GiftLucky:
			lucky = true
		default:
			p = append(p, fmt.Errorf("%s: kind %q is not normal or lucky", where, g.Kind))
		}
		if len(g.Counts) == 0 {
			p = append(p, fmt.Errorf("%s: counts is empty", where))
		}
		for _, n := range g.Counts {
			if n < 1 || n > room.MaxGiftCount {
				p = append(p, fmt.Errorf("%s: count %d is outside 1..%d", where, n, room.MaxGiftCount))
			}
		}
		if g.RegionalThreshold < 0 {
			p = append(p, fmt.Errorf("%s: regional_threshold is negative", where))
		}
		if g.RegionalThreshold == 0 {
			g.RegionalThreshold = s.RegionalThreshold
		}
		g.Counts = slices.Clone(g.Counts)
		slices.Sort(g.Counts)
		g.Counts = slices.Compact(g.Counts)
		c.gifts = append(c.gifts, g)
	}
	for i := range c.gifts {
		c.byID[c.gifts[i].ID] = &c.gifts[i]
	}
	if err := c.setLucky(s.Lucky, s.MaxPayoutBP, lucky); err != nil {
		p = append(p, err)
	}
	return c, errors.Join(p...)
}

func validID(id string) bool {
	if id == "" || len(id) > room.MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func (c *Catalogue) setLucky(rows []Outcome, maxPayoutBP int64, needed bool) error {
	if len(rows) == 0 {
		if needed {
			return errors.New("lucky_table is empty but the catalogue has lucky gifts")
		}
		return nil
	}
	if len(rows) > MaxOutcomes {
		return fmt.Errorf("lucky_table: %d rows, at most %d", len(rows), MaxOutcomes)
	}
	var p []error
	var weighted big.Int // sum of weight x bp, exact
	for i, r := range rows {
		bp := math.Round(r.Multiplier * room.BasisPoints)
		// Written so that NaN fails it: every comparison with NaN is
		// false, and int64(NaN) would add the lowest int64 to the
		// expected payout, hiding what the other rows pay.
		if !(r.Multiplier >= 0 && r.Multiplier <= MaxMultiplier) || math.Abs(bp-r.Multiplier*room.BasisPoints) > 1e-6 {
			p = append(p, fmt.Errorf("lucky_table[%d]: multiplier %v must be 0..%d with at most 4 decimals", i, r.Multiplier, MaxMultiplier))
			continue
		}
		if r.Weight <= 0 || r.Weight > 1e12 {
			p = append(p, fmt.Errorf("lucky_table[%d]: weight %d must be 1..1e12", i, r.Weight))
			continue
		}
		c.total += r.Weight
		c.lucky = append(c.lucky, luckyRow{bp: int64(bp), cumulative: c.total})
		weighted.Add(&weighted, new(big.Int).Mul(big.NewInt(r.Weight), big.NewInt(int64(bp))))
	}
	if len(p) > 0 {
		return errors.Join(p...)
	}
	c.expected = new(big.Int).Quo(&weighted, big.NewInt(c.total)).Int64()
	// Compare exactly: weighted / total > max  <=>  weighted > max x total.
	if weighted.Cmp(new(big.Int).Mul(big.NewInt(maxPayoutBP), big.NewInt(c.total))) > 0 {
		return fmt.Errorf("lucky_table: expected payout %d bp per coin spent is over lucky_max_payout_bp %d", c.expected, maxPayoutBP)
	}
	return nil
}

// Gifts returns the catalogue in configured order. Callers must not modify it.
func (c *Catalogue) Gifts() []Gift { return c.gifts }

// ExpectedPayoutBP is the lucky table's expected payout per coin spent, in basis points.
func (c *Catalogue) ExpectedPayoutBP() int64 { return c.expected }

// Prepare checks a send against the catalogue and fills in the outcome the
// command records: the gift's facts and, for a lucky gift, a multiplier
// drawn with crypto/rand. Unknown gifts and counts the gift does not allow
// are refused here, before anything is charged.
func (c *Catalogue) Prepare(g *room.SendGift) error {
	entry, ok := c.byID[g.GiftID]
	if !ok {
		return room.Errorf(room.ErrUnknownGift, "gift %q is not in the catalogue", g.GiftID)
	}
	if _, ok := slices.BinarySearch(entry.Counts, g.Count); !ok {
		return room.Errorf(room.ErrCountNotAllowed, "gift %s is sent in counts %v, not %d", g.GiftID, entry.Counts, g.Count)
	}
	g.Outcome = room.GiftOutcome{
		Name: entry.Name, Price: entry.Price, Kind: entry.Kind, ReceiversOnMic: !entry.AnyReceiver,
		RegionalThreshold: entry.RegionalThreshold,
	}
	if entry.Kind == room.GiftLucky {
		bp, err := c.draw()
		if err != nil {
			return room.Errorf(room.ErrUnavailable, "lucky draw: %v", err)
		}
		g.Outcome.MultiplierBP, g.Outcome.LuckyRegionalMin = bp, c.luckyRegionalMin
	}
	return nil
}

// draw picks a lucky row by weight with crypto/rand.
func (c *Catalogue) draw() (int64, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(c.total))
	if err != nil {
		return 0, err
	}
	x := n.Int64()
	i, _ := slices.BinarySearchFunc(c.lucky, x, func(r luckyRow, x int64) int {
		if r.cumulative <= x {
			return -1
		}
		return 1
	})
	return c.lucky[i].bp, nil
}
