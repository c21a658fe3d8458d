package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// setupWallet registers "roomctl wallet credit <user> <amount> [-key K]" and
// "roomctl wallet balance <user>".
func setupWallet(fs *flag.FlagSet) func(ctx context.Context, c *client, args []string, out io.Writer) error {
	key := fs.String("key", "", "credit: idempotency key (default: a new random key, so a rerun credits again)")
	return func(ctx context.Context, c *client, args []string, out io.Writer) error {
		user, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return usagef("user_id %q is not a number", args[1])
		}
		switch {
		case args[0] == "balance" && len(args) == 2:
			res, err := c.wallets.GetBalance(ctx, connect.NewRequest(&roomv1.GetBalanceRequest{UserId: user}))
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "user %d balance %d\n", user, res.Msg.GetBalance())
			return nil
		case args[0] == "credit" && len(args) == 3:
			amount, err := strconv.ParseInt(args[2], 10, 64)
			if err != nil {
				return usagef("amount %q is not a number", args[2])
			}
			k := *key
			if k == "" {
				k = "roomctl-" + strings.ToLower(rand.Text())
			}
			res, err := c.wallets.CreditCoins(ctx, connect.NewRequest(&roomv1.CreditCoinsRequest{UserId: user, Amount: amount, IdempotencyKey: k}))
			if err != nil {
				return err
			}
			note := ""
			if res.Msg.GetDuplicate() {
				note = " (key used before: nothing credited)"
			}
			fmt.Fprintf(out, "user %d balance %d key %s%s\n", user, res.Msg.GetBalance(), k, note)
			return nil
		}
		return usagef("wallet takes credit <user_id> <amount> or balance <user_id>")
	}
}

// setupGifts registers "roomctl gifts".
func setupGifts(*flag.FlagSet) func(ctx context.Context, c *client, args []string, out io.Writer) error {
	return func(ctx context.Context, c *client, _ []string, out io.Writer) error {
		res, err := c.rooms.ListGifts(ctx, connect.NewRequest(&roomv1.ListGiftsRequest{}))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%-16s %-16s %10s %-6s %-8s %s\n", "GIFT", "NAME", "PRICE", "KIND", "ON MIC", "COUNTS")
		for _, g := range res.Msg.GetGifts() {
			kind := "normal"
			if g.GetKind() == roomv1.GiftKind_GIFT_KIND_LUCKY {
				kind = "lucky"
			}
			fmt.Fprintf(out, "%-16s %-16s %10d %-6s %-8t %v\n", g.GetGiftId(), g.GetName(), g.GetPrice(), kind, g.GetReceiversOnMic(), g.GetAllowedCounts())
		}
		fmt.Fprintf(out, "lucky expected payout: %.2f%% of the spend\n", float64(res.Msg.GetLuckyExpectedPayoutBp())/100)
		return nil
	}
}
