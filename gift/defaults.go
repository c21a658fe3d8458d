package gift

import "hyapp/room-service/room"

// DefaultGifts is the sample catalogue the zero-configuration service
// ships, so gifts work out of the box: four normal gifts and two lucky ones.
func DefaultGifts() []Gift {
	return []Gift{
		{ID: "rose", Name: "Rose", Price: 1, Kind: room.GiftNormal, Counts: []int32{1, 10, 66, 99, 520, 1314}},
		{ID: "heart", Name: "Heart", Price: 10, Kind: room.GiftNormal, Counts: []int32{1, 7, 77, 777}},
		{ID: "sports_car", Name: "Sports Car", Price: 5_000, Kind: room.GiftNormal, Counts: []int32{1}, RegionalThreshold: 5_000},
		{ID: "castle", Name: "Castle", Price: 20_000, Kind: room.GiftNormal, Counts: []int32{1}, AnyReceiver: true},
		{ID: "lucky_clover", Name: "Lucky Clover", Price: 10, Kind: room.GiftLucky, Counts: []int32{1, 10, 99}},
		{ID: "lucky_star", Name: "Lucky Star", Price: 100, Kind: room.GiftLucky, Counts: []int32{1, 10}},
	}
}

// DefaultLucky is the sample lucky table: it pays back 92.5% of the spend
// on average, most sends miss and one in ten thousand pays 500x.
func DefaultLucky() []Outcome {
	return []Outcome{
		{Multiplier: 0, Weight: 5_501}, {Multiplier: 0.5, Weight: 2_000}, {Multiplier: 1, Weight: 1_500},
		{Multiplier: 2, Weight: 600}, {Multiplier: 5, Weight: 250}, {Multiplier: 10, Weight: 100},
		{Multiplier: 50, Weight: 40}, {Multiplier: 100, Weight: 8}, {Multiplier: 500, Weight: 1},
	}
}
