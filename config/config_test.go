package config_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"hyapp/room-service/auth"
	"hyapp/room-service/config"
)

// env returns a getenv over vars only, so tests never see the real environment.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// writeFile writes a config file in a fresh temporary directory.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "room.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustMention fails unless err names every key. Keys are compared without
// case, so ROOM_SNAPSHOT_EVERY names snapshot_every.
func mustMention(t *testing.T, err error, keys ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one naming %v", keys)
	}
	msg := strings.ToLower(err.Error())
	for _, k := range keys {
		if !strings.Contains(msg, k) {
			t.Errorf("the error does not name %s:\n%v", k, err)
		}
	}
}

func TestDefaultsAreValid(t *testing.T) {
	if err := config.Default().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg, err := config.Load(nil, env(nil))
	if err != nil {
		t.Fatalf("load with nothing set: %v", err)
	}
	if !reflect.DeepEqual(cfg, config.Default()) {
		t.Fatalf("load with nothing set:\n got %+v\nwant %+v", cfg, config.Default())
	}
}

// TestPrecedence checks the order defaults < file < environment < flags,
// for each kind of field.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, `
snapshot_every: 11
log_level: debug
idle_timeout: 5m
platform_operators: [7, 8]
mailbox_size: 33
`)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(*config.Config)
	}{
		{
			name: "environment over default",
			env:  map[string]string{"ROOM_SNAPSHOT_EVERY": "7", "ROOM_LOG_FORMAT": "json", "ROOM_COMMIT_TIMEOUT": "2s", "ROOM_PLATFORM_OPERATORS": "5, 6"},
			want: func(c *config.Config) {
				c.SnapshotEvery, c.LogFormat, c.CommitTimeout, c.PlatformUsers = 7, "json", 2*time.Second, []int64{5, 6}
			},
		},
		{
			name: "flag over environment",
			args: []string{"-snapshot-every", "9", "-log-format=text", "-platform-operators", "4"},
			env:  map[string]string{"ROOM_SNAPSHOT_EVERY": "7", "ROOM_LOG_FORMAT": "json", "ROOM_PLATFORM_OPERATORS": "5"},
			want: func(c *config.Config) { c.SnapshotEvery, c.PlatformUsers = 9, []int64{4} },
		},
		{
			name: "file by -config",
			args: []string{"-config", file},
			want: func(c *config.Config) {
				c.SnapshotEvery, c.LogLevel, c.IdleTimeout, c.PlatformUsers, c.MailboxSize = 11, "debug", 5*time.Minute, []int64{7, 8}, 33
			},
		},
		{
			name: "file by ROOM_CONFIG",
			env:  map[string]string{"ROOM_CONFIG": file},
			want: func(c *config.Config) {
				c.SnapshotEvery, c.LogLevel, c.IdleTimeout, c.PlatformUsers, c.MailboxSize = 11, "debug", 5*time.Minute, []int64{7, 8}, 33
			},
		},
		{
			name: "environment and flag over file",
			args: []string{"-log-level", "warn"},
			env:  map[string]string{"ROOM_CONFIG": file, "ROOM_SNAPSHOT_EVERY": "12", "ROOM_LOG_LEVEL": "error"},
			want: func(c *config.Config) {
				c.SnapshotEvery, c.LogLevel, c.IdleTimeout, c.PlatformUsers, c.MailboxSize = 12, "warn", 5*time.Minute, []int64{7, 8}, 33
			},
		},
		{
			name: "-config over ROOM_CONFIG",
			args: []string{"-config", file},
			env:  map[string]string{"ROOM_CONFIG": filepath.Join(t.TempDir(), "missing.yaml")},
			want: func(c *config.Config) {
				c.SnapshotEvery, c.LogLevel, c.IdleTimeout, c.PlatformUsers, c.MailboxSize = 11, "debug", 5*time.Minute, []int64{7, 8}, 33
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.Load(tt.args, env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			want := config.Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestEmptyFileKeepsDefaults(t *testing.T) {
	got, err := config.Load([]string{"-config", writeFile(t, "")}, env(nil))
	if err != nil || !reflect.DeepEqual(got, config.Default()) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestFileErrors(t *testing.T) {
	t.Run("unknown key", func(t *testing.T) {
		_, err := config.Load([]string{"-config", writeFile(t, "listen: 127.0.0.1:1\nsnapshot_evry: 5\n")}, env(nil))
		mustMention(t, err, "snapshot_evry")
	})
	t.Run("missing file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.yaml")
		_, err := config.Load(nil, env(map[string]string{"ROOM_CONFIG": missing}))
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("got %v, want a not-exist error", err)
		}
	})
}

// TestValidateReportsEveryProblem: invalid values that each parse are all
// reported by one error, wherever they come from.
func TestValidateReportsEveryProblem(t *testing.T) {
	keys := []string{"listen", "snapshot_every", "log_level", "idle_timeout", "platform_operators"}
	sources := map[string]func(t *testing.T) error{
		"environment": func(*testing.T) error {
			_, err := config.Load(nil, env(map[string]string{
				"ROOM_LISTEN": "nope", "ROOM_SNAPSHOT_EVERY": "0", "ROOM_LOG_LEVEL": "loud",
				"ROOM_IDLE_TIMEOUT": "-1s", "ROOM_PLATFORM_OPERATORS": "3,-4",
			}))
			return err
		},
		"flags": func(*testing.T) error {
			_, err := config.Load([]string{
				"-listen", "nope", "-snapshot-every", "0", "-log-level", "loud", "-idle-timeout", "-1s", "-platform-operators", "3,-4",
			}, env(nil))
			return err
		},
		"file": func(t *testing.T) error {
			path := writeFile(t, "listen: nope\nsnapshot_every: 0\nlog_level: loud\nidle_timeout: -1s\nplatform_operators: [3, -4]\n")
			_, err := config.Load([]string{"-config", path}, env(nil))
			return err
		},
		"Validate": func(*testing.T) error {
			c := config.Default()
			c.Listen, c.SnapshotEvery, c.LogLevel, c.IdleTimeout, c.PlatformUsers = "nope", 0, "loud", -time.Second, []int64{3, -4}
			return c.Validate()
		},
	}
	for name, load := range sources {
		t.Run(name, func(t *testing.T) { mustMention(t, load(t), keys...) })
	}
}

// TestParseAndValidateProblemsTogether: a value that does not even parse
// (platform_operators "a,b") is reported together with the invalid values
// that did parse, as STYLE rule 7 asks ("Validate() that reports every
// problem at once").
func TestParseAndValidateProblemsTogether(t *testing.T) {
	_, err := config.Load(nil, env(map[string]string{
		"ROOM_LISTEN": "nope", "ROOM_SNAPSHOT_EVERY": "0", "ROOM_LOG_LEVEL": "loud",
		"ROOM_IDLE_TIMEOUT": "-1s", "ROOM_PLATFORM_OPERATORS": "a,b",
	}))
	mustMention(t, err, "listen", "snapshot_every", "log_level", "idle_timeout", "platform_operators")
}

func TestUnparsableValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		key  string
	}{
		{name: "env int", env: map[string]string{"ROOM_MAX_BATCH": "many"}, key: "max_batch"},
		{name: "env duration", env: map[string]string{"ROOM_COMMIT_TIMEOUT": "5"}, key: "commit_timeout"},
		{name: "env id list", env: map[string]string{"ROOM_PLATFORM_OPERATORS": "a,b"}, key: "platform_operators"},
		{name: "flag int", args: []string{"-max-batch", "many"}, key: "max-batch"},
		{name: "unknown flag", args: []string{"-snapshot-evry", "5"}, key: "snapshot-evry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Load(tt.args, env(tt.env))
			mustMention(t, err, tt.key)
		})
	}
}

// longToken is a token long enough to be accepted.
const longToken = "s3cret-s3cret-s3cret-s3cret-s3cret"

func TestCallers(t *testing.T) {
	gw, topup := "gateway-token-0123456789abcdef-xyz", "topup-token-0123456789abcdef-xyzw"
	sum := sha256.Sum256([]byte("console-token-0123456789abcdef-xyz"))
	path := writeFile(t, `
user_jwt_keys: hs256:user-secret-0123456789abcdef-0123
callers:
  - {name: console, token_sha256: `+hex.EncodeToString(sum[:])+`, scopes: [operator, platform, room]}
`)
	cfg, err := config.Load([]string{"-config", path, "-listen", "0.0.0.0:8080"}, env(map[string]string{
		"ROOM_TOKENS": "gw=" + gw + ":room;topup=" + topup + ":wallet.credit", "ROOM_TOKEN": longToken,
	}))
	if err != nil {
		t.Fatal(err)
	}
	callers, err := cfg.Callers()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range callers {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "token,gw,topup,console" || !callers[0].Has(auth.ActAsAny) || !callers[0].Has(auth.Room) ||
		callers[0].Has(auth.Operator) || callers[0].Has(auth.WalletCredit) || callers[3].Hash != sum {
		t.Fatalf("callers %+v", callers)
	}
	if s := fmt.Sprint(cfg.Redacted()...); strings.Contains(s, gw) || strings.Contains(s, "user-secret") {
		t.Errorf("a secret leaks: %s", s)
	}

	for name, tt := range map[string]struct {
		env  map[string]string
		keys []string
	}{
		"a short token":                   {map[string]string{"ROOM_TOKEN": "s3cret"}, []string{"token", "32"}},
		"a short token in tokens":         {map[string]string{"ROOM_TOKENS": "gw=short:room+act-as-any"}, []string{"tokens", "32"}},
		"an unknown scope":                {map[string]string{"ROOM_TOKENS": "gw=" + gw + ":room+root"}, []string{"tokens", "root"}},
		"one token for two callers":       {map[string]string{"ROOM_TOKENS": "a=" + gw + ":room+act-as-any;b=" + gw + ":operator"}, []string{"same token"}},
		"room without act-as-any":         {map[string]string{"ROOM_TOKENS": "gw=" + gw + ":room"}, []string{"gw", "user_jwt_keys"}},
		"bad user keys":                   {map[string]string{"ROOM_USER_JWT_KEYS": "hs256:short"}, []string{"user_jwt_keys"}},
		"a missing JWKS file":             {map[string]string{"ROOM_USER_JWT_KEYS": "jwks:/nonexistent/users.jwks"}, []string{"user_jwt_keys"}},
		"a bad admin address":             {map[string]string{"ROOM_ADMIN_LISTEN": "nowhere"}, []string{"admin_listen"}},
		"a lucky payout above 100%":       {map[string]string{"ROOM_LUCKY_MAX_PAYOUT_BP": "10001"}, []string{"lucky_max_payout_bp"}},
		"a request limit of nothing":      {map[string]string{"ROOM_MAX_REQUEST_BYTES": "0"}, []string{"max_request_bytes"}},
		"an exposed NATS without a token": {map[string]string{"ROOM_NATS_LISTEN": "0.0.0.0:4333"}, []string{"nats_listen", "nats_token"}},
		"a short NATS token":              {map[string]string{"ROOM_NATS_LISTEN": "0.0.0.0:4333", "ROOM_NATS_TOKEN": "short"}, []string{"nats_token", "32"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Load(nil, env(tt.env))
			mustMention(t, err, tt.keys...)
			if err != nil && (strings.Contains(err.Error(), gw) || strings.Contains(err.Error(), "short")) {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}

func TestExposedNATSNeedsAToken(t *testing.T) {
	if _, err := config.Load([]string{"-nats-listen", "127.0.0.1:4333"}, env(nil)); err != nil {
		t.Fatalf("loopback without a token: %v", err)
	}
	if _, err := config.Load([]string{"-nats-listen", "0.0.0.0:4333"}, env(map[string]string{"ROOM_NATS_TOKEN": longToken})); err != nil {
		t.Fatalf("exposed with a token: %v", err)
	}
}

func TestListenNeedsTokenOffLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "10.1.2.3:8080", "[::]:8080"} {
		t.Run(addr, func(t *testing.T) {
			_, err := config.Load([]string{"-listen", addr}, env(nil))
			mustMention(t, err, "listen", "token")
			cfg, err := config.Load([]string{"-listen", addr}, env(map[string]string{"ROOM_TOKEN": longToken}))
			if err != nil || cfg.Listen != addr || cfg.Token != longToken {
				t.Fatalf("with a token: %+v, %v", cfg, err)
			}
		})
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:8080", "[::1]:8080"} {
		t.Run(addr, func(t *testing.T) {
			if _, err := config.Load([]string{"-listen", addr}, env(nil)); err != nil {
				t.Fatalf("loopback without a token: %v", err)
			}
		})
	}
}

// TestTokensThatNameNoCallerAreNoCredentials: a tokens setting that holds
// only separators or spaces (an empty secret rendered into a template)
// names no caller, so the API would serve every call with every right: it
// is refused, and does not let the API off loopback.
func TestTokensThatNameNoCallerAreNoCredentials(t *testing.T) {
	for _, tokens := range []string{";", " ; ", "\n"} {
		t.Run(fmt.Sprintf("%q", tokens), func(t *testing.T) {
			_, err := config.Load([]string{"-listen", "0.0.0.0:8080"}, env(map[string]string{"ROOM_TOKENS": tokens}))
			mustMention(t, err, "tokens", "listen")
			cfg := config.Default()
			cfg.Tokens = tokens
			if cfg.HasCredentials() {
				t.Fatalf("tokens %q count as credentials", tokens)
			}
		})
	}
}

func TestPositionalArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{{"serve"}, {"-listen", "127.0.0.1:1", "extra"}, {"--", "x"}} {
		if _, err := config.Load(args, env(nil)); err == nil {
			t.Errorf("Load(%q) accepted positional arguments", args)
		}
	}
}

func TestHelp(t *testing.T) {
	if _, err := config.Load([]string{"-h"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v, want flag.ErrHelp", err)
	}
}

// redacted returns Redacted's key=value pairs as a map.
func redacted(t *testing.T, c config.Config) map[string]string {
	t.Helper()
	kv := c.Redacted()
	if len(kv)%2 != 0 {
		t.Fatalf("Redacted returned an odd number of values: %v", kv)
	}
	out := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		out[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
	}
	return out
}

func TestRedactedMasksSecrets(t *testing.T) {
	c := config.Default()
	c.Token = "s3cret-token"
	c.MySQLDSN = "room:s3cret-pass@tcp(db:3306)/room"
	got := redacted(t, c)
	for _, key := range []string{"token", "mysql_dsn"} {
		if got[key] != "<redacted>" {
			t.Errorf("%s is %q, want it masked", key, got[key])
		}
	}
	if s := fmt.Sprint(c.Redacted()...); strings.Contains(s, "s3cret") {
		t.Errorf("a secret leaks: %s", s)
	}
	if got["listen"] != c.Listen || got["snapshot_every"] != "500" {
		t.Errorf("other settings must stay readable: %v", got)
	}
	c.Token = ""
	if got := redacted(t, c)["token"]; got != "" {
		t.Errorf("an empty token shows as %q; want empty, so operators see it is unset", got)
	}
}

func TestEconomyFromFile(t *testing.T) {
	path := writeFile(t, `
business_timezone: Asia/Riyadh
business_day_start: 4h
rank_size: 5
gifts:
  - {id: tea, name: Tea, price: 3, kind: normal, counts: [1, 5]}
  - {id: dice, name: Dice, price: 20, kind: lucky, counts: [1], any_receiver: true}
lucky_table:
  - {multiplier: 0, weight: 3}
  - {multiplier: 2.5, weight: 1}
lucky_max_payout_bp: 6250
rocket_levels:
  - {fuel: 100, countdown: 5s}
  - {fuel: 300, countdown: 1m}
`)
	cfg, err := config.Load([]string{"-config", path}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := cfg.Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cat.Gifts()); n != 2 || cat.ExpectedPayoutBP() != 6250 {
		t.Fatalf("catalogue: %d gifts, payout %d bp", n, cat.ExpectedPayoutBP())
	}
	rules, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if rules.Location.String() != "Asia/Riyadh" || rules.DayStart != 4*time.Hour || rules.RankSize != 5 ||
		len(rules.RocketLevels) != 2 || rules.RocketLevels[1].Fuel != 300 || rules.RocketLevels[1].Countdown != time.Minute {
		t.Fatalf("rules: %+v", rules)
	}
}

func TestEconomyProblemsRefuseToStart(t *testing.T) {
	path := writeFile(t, `
business_timezone: Mars/Olympus
business_day_start: 25h
lucky_table:
  - {multiplier: 0, weight: 1}
  - {multiplier: 3, weight: 1}
rocket_levels:
  - {fuel: 0, countdown: 5s}
gift_apply_window: 1m
wallet_reconcile_after: 1m
`)
	_, err := config.Load([]string{"-config", path}, env(nil))
	mustMention(t, err, "business_timezone", "business_day_start", "expected payout 15000 bp", "rocket_levels[0]", "wallet_reconcile_after")
}

// TestFleetModeNeedsSharedServices: redis_url alone is refused, with every
// missing piece named at once.
func TestFleetModeNeedsSharedServices(t *testing.T) {
	_, err := config.Load(nil, env(map[string]string{"ROOM_REDIS_URL": "redis://127.0.0.1:6379/0"}))
	mustMention(t, err, "mysql_dsn", "nats_url", "advertise_addr")
}

func TestFleetModeSettings(t *testing.T) {
	fleet := func() config.Config {
		c := config.Default()
		c.RedisURL, c.MySQLDSN, c.NATSURL = "redis://127.0.0.1:6379/0", "root@tcp(db:3306)/rooms", "nats://nats:4222"
		c.NodeID, c.AdvertiseAddr = "node-1", "10.0.0.7:8080"
		return c
	}
	if err := fleet().Validate(); err != nil {
		t.Fatalf("a complete fleet configuration: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*config.Config)
		key    string
	}{
		{"unspecified advertise host", func(c *config.Config) { c.AdvertiseAddr = "0.0.0.0:8080" }, "advertise_addr"},
		{"advertise without port", func(c *config.Config) { c.AdvertiseAddr = "10.0.0.7" }, "advertise_addr"},
		{"advertise port not a number", func(c *config.Config) { c.AdvertiseAddr = "10.0.0.7:808O" }, "advertise_addr"},
		{"advertise port past 65535", func(c *config.Config) { c.AdvertiseAddr = "10.0.0.7:80800" }, "advertise_addr"},
		{"short ttl", func(c *config.Config) { c.LeaseTTL = 300 * time.Millisecond }, "lease_ttl"},
		{"not a redis url", func(c *config.Config) { c.RedisURL = "http://cache:6379" }, "redis_url"},
		{"separator in node id", func(c *config.Config) { c.NodeID = "a|b" }, "node_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fleet()
			tc.change(&c)
			mustMention(t, c.Validate(), tc.key)
		})
	}
	// Without redis_url none of this is asked for: one node, the in-process lease.
	c := config.Default()
	c.AdvertiseAddr = ""
	if err := c.Validate(); err != nil {
		t.Fatalf("zero configuration: %v", err)
	}
}

// TestIMBudgets: the app budget of send_group_msg and the other commands'
// budgets come from ROOM_TIM_APP_BUDGET and ROOM_TIM_CALL_BUDGET, default
// to Tencent's 200/s, and must be positive.
func TestIMBudgets(t *testing.T) {
	if d := config.Default(); d.TIMAppBudget != 200 || d.TIMCallBudget != 200 {
		t.Fatalf("default budgets %d, %d; want Tencent's 200", d.TIMAppBudget, d.TIMCallBudget)
	}
	cfg, err := config.Load(nil, env(map[string]string{"ROOM_TIM_APP_BUDGET": "300", "ROOM_TIM_CALL_BUDGET": "100"}))
	if err != nil || cfg.TIMAppBudget != 300 || cfg.TIMCallBudget != 100 {
		t.Fatalf("from the environment: %d, %d, %v", cfg.TIMAppBudget, cfg.TIMCallBudget, err)
	}
	_, err = config.Load([]string{"-tim-app-budget", "0", "-tim-call-budget", "-1"}, env(nil))
	mustMention(t, err, "tim_app_budget", "tim_call_budget")
}

// TestGRPCBusyRead: 20 ms by default, 0 turns it off, and a negative value,
// one under a millisecond (the retry's period) or one past a second is
// refused by name.
func TestGRPCBusyRead(t *testing.T) {
	if d := config.Default().GRPCBusyRead; d != 20*time.Millisecond {
		t.Fatalf("default grpc_busy_read %v; want 20ms", d)
	}
	c, err := config.Load(nil, env(map[string]string{"ROOM_GRPC_BUSY_READ": "0"}))
	if err != nil || c.GRPCBusyRead != 0 {
		t.Fatalf("grpc_busy_read 0: %v, %v", c.GRPCBusyRead, err)
	}
	for _, v := range []string{"-1ms", "500us", "2s"} {
		_, err := config.Load(nil, env(map[string]string{"ROOM_GRPC_BUSY_READ": v}))
		mustMention(t, err, "grpc_busy_read")
	}
}

// TestCommitLinger: 1 ms by default, 0 turns it off, and a negative value,
// one under 100 µs or one past 50 ms is refused by name.
func TestCommitLinger(t *testing.T) {
	if d := config.Default().CommitLinger; d != time.Millisecond {
		t.Fatalf("default commit_linger %v; want 1ms", d)
	}
	c, err := config.Load([]string{"-commit-linger", "0"}, env(nil))
	if err != nil || c.CommitLinger != 0 {
		t.Fatalf("commit_linger 0: %v, %v", c.CommitLinger, err)
	}
	for _, v := range []string{"-1ms", "50us", "51ms"} {
		_, err := config.Load(nil, env(map[string]string{"ROOM_COMMIT_LINGER": v}))
		mustMention(t, err, "commit_linger")
	}
}

// TestBatchLinger: 2 ms by default, 0 turns it off, and a negative value,
// one under 100 µs or one past 50 ms is refused by name.
func TestBatchLinger(t *testing.T) {
	if d := config.Default().BatchLinger; d != 2*time.Millisecond {
		t.Fatalf("default batch_linger %v; want 2ms", d)
	}
	c, err := config.Load([]string{"-batch-linger", "0"}, env(nil))
	if err != nil || c.BatchLinger != 0 {
		t.Fatalf("batch_linger 0: %v, %v", c.BatchLinger, err)
	}
	for _, v := range []string{"-1ms", "50us", "51ms"} {
		_, err := config.Load(nil, env(map[string]string{"ROOM_BATCH_LINGER": v}))
		mustMention(t, err, "batch_linger")
	}
}

// A member nobody sees must leave a loaded room before the room unloads for
// idleness: presence runs in loaded rooms only.
func TestPresenceTimeoutIsShorterThanTheIdleTimeout(t *testing.T) {
	c := config.Default()
	c.PresenceTimeout, c.IdleTimeout = 15*time.Minute, 10*time.Minute
	mustMention(t, c.Validate(), "presence_timeout", "idle_timeout")
	c.PresenceTimeout = 9 * time.Minute
	if err := c.Validate(); err != nil {
		t.Fatalf("presence_timeout 9m, idle_timeout 10m: %v", err)
	}
}

// TestNodeIDFitsTheOwnerColumn: node_id is stored as a room's owner
// (rooms.owner_node, 128 bytes on MySQL) and named by Drain (at most 128
// bytes): a longer one is refused at start, also on a single node, instead
// of failing every claim of a room once the service runs.
func TestNodeIDFitsTheOwnerColumn(t *testing.T) {
	c := config.Default()
	c.NodeID = strings.Repeat("n", 128)
	if err := c.Validate(); err != nil {
		t.Fatalf("a node_id of 128 bytes: %v", err)
	}
	_, err := config.Load([]string{"-node-id", strings.Repeat("n", 129)}, env(nil))
	mustMention(t, err, "node_id")
}

// TestACallbackTokenWithWhiteSpaceAtItsEndsIsRefused: a secret rendered
// with its file's newline, or an empty one as spaces, would make every
// Tencent callback fail its signature (or sign with a blank token).
func TestACallbackTokenWithWhiteSpaceAtItsEndsIsRefused(t *testing.T) {
	for _, token := range []string{" ", "\n", "s3cret\n", " s3cret"} {
		c := config.Default()
		c.TIMCallbackToken = token
		mustMention(t, c.Validate(), "tim_callback_token")
	}
	c := config.Default()
	c.TIMCallbackToken = "s3cret token"
	if err := c.Validate(); err != nil {
		t.Fatalf("a token with a space inside: %v", err)
	}
}
