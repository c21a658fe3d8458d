// Package config is room-service's one strict configuration path: defaults,
// then an optional YAML file (unknown keys rejected), then ROOM_* environment
// variables, then command-line flags; Validate reports every problem at once.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"hyapp/room-service/auth"
	"hyapp/room-service/gift"
	"hyapp/room-service/room"
)

// Config is every setting of the service. The yaml key of a field is also its
// flag name (with - for _) and, upper-cased with the ROOM_ prefix, its
// environment variable: listen, -listen, ROOM_LISTEN.
type Config struct {
	Listen          string        `yaml:"listen" help:"address to serve the API on; any non-loopback address needs credentials (token, tokens or callers)"`
	GRPCListen      string        `yaml:"grpc_listen" help:"address to serve the API's gRPC protocol on with grpc-go's transport, which costs less CPU per call than listen's: the same calls, credentials and request limits (off: not served; any non-loopback address needs credentials)"`
	GRPCBusyRead    time.Duration `yaml:"grpc_busy_read" help:"how long a read of a grpc_listen connection that finds no data, while every processor is busy and goroutines wait for one, reads again every 1ms instead of waiting for Go's network poller, which a saturated process consults only every 10 ms (0: never; else 1ms..1s)"`
	DataDir         string        `yaml:"data_dir" help:"directory for the embedded SQLite database"`
	MySQLDSN        string        `yaml:"mysql_dsn" help:"MySQL/MariaDB DSN (user:pass@tcp(host:3306)/db); when set, rooms are stored there instead of SQLite" secret:"true"`
	Token           string        `yaml:"token" help:"service token callers send as 'Authorization: Bearer <token>' (at least 32 bytes): one caller with the scopes room and act-as-any" secret:"true"`
	NodeID          string        `yaml:"node_id" help:"this node's name in room ownership records and the fleet (default: host name)"`
	RedisURL        string        `yaml:"redis_url" help:"Redis for room leases and fleet membership (redis://host:6379/0); when set, this node is one of a fleet sharing mysql_dsn and nats_url" secret:"true"`
	RedisKeyPrefix  string        `yaml:"redis_key_prefix" help:"fleet mode: prefix of the fleet's Redis keys, so fleets (staging, production) can share one Redis; every node of a fleet sets the same"`
	AdvertiseAddr   string        `yaml:"advertise_addr" help:"fleet mode: host:port the other nodes reach this node's API on"`
	LeaseTTL        time.Duration `yaml:"lease_ttl" help:"fleet mode: time to live of a room's lease in Redis; a crashed node's rooms move after about this long"`
	DrainGrace      time.Duration `yaml:"drain_grace" help:"fleet mode: how long a stopping node keeps taking calls (forwarding them to the rooms' next owners) after its readiness turns false, so load balancers stop sending to it first"`
	LogLevel        string        `yaml:"log_level" help:"debug, info, warn or error"`
	LogFormat       string        `yaml:"log_format" help:"text or json"`
	SQLiteSync      string        `yaml:"sqlite_synchronous" help:"FULL (every commit durable) or NORMAL"`
	SnapshotEvery   int           `yaml:"snapshot_every" help:"fewest commands between stored room snapshots; a room whose snapshot outweighs its log waits until the log since the last one is as large, at most 20 times as many commands"`
	MailboxSize     int           `yaml:"mailbox_size" help:"queued requests per room before mailbox_full"`
	MaxBatch        int           `yaml:"max_batch" help:"most commands a room commits in one batch"`
	BatchLinger     time.Duration `yaml:"batch_linger" help:"how long a busy room (its last batch held 4 commands or more, and commands queued while it committed) waits for 32 queued commands (max_batch if lower) before it commits fewer, so that a hot room's commits carry more commands each; a quiet room never waits (0: never; else 100us..50ms)"`
	CommitWorkers   int           `yaml:"commit_workers" help:"parallel group-commit transactions (0: 1 on SQLite, 4 on MySQL)"`
	CommitLinger    time.Duration `yaml:"commit_linger" help:"how long a busy group commit (its last transaction carried 4 rooms or more and ended less than 10 times commit_linger before the next room came) waits for 64 queued rooms before it commits fewer, so that when many rooms each commit a command or two its transactions carry more rooms; commits of a room or two never wait; only a single commit worker lingers, as on SQLite (0: never; else 100us..50ms)"`
	IdleTimeout     time.Duration `yaml:"idle_timeout" help:"unload a room idle for this long"`
	CommitTimeout   time.Duration `yaml:"commit_timeout" help:"bound on one commit transaction"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" help:"bound on graceful shutdown"`
	PlatformUsers   []int64       `yaml:"platform_operators" help:"comma-separated user ids of platform staff, who may act as any room's owner"`
	NATSURL         string        `yaml:"nats_url" help:"NATS server or cluster for durable room events (nats://host:4222,...); empty: an embedded server storing under data_dir/nats" secret:"true"`
	NATSListen      string        `yaml:"nats_listen" help:"embedded NATS: also listen on this address (such as 127.0.0.1:4333) so consumers can attach; off loopback it needs nats_token"`
	NATSToken       string        `yaml:"nats_token" help:"embedded NATS: the token every client presents (nats://<token>@host:port), at least 32 bytes" secret:"true"`
	NATSStream      string        `yaml:"nats_stream" help:"JetStream stream of durable room events"`
	NATSSubjects    string        `yaml:"nats_subject_prefix" help:"subject prefix of durable room events: the stream captures <prefix>.> (two streams on one server need different prefixes)"`
	NATSFastBatches string        `yaml:"nats_fast_batches" help:"a busy room's runs of events, and short runs of many rooms publishing at once, go to the stream as JetStream fast batches: embedded (with the embedded server only), on (also with nats_url: every server of the cluster must run NATS 2.14 or later, and one older that loads the stream marks it offline, so turn it off before going back) or off"`
	RelayAttempts   int           `yaml:"relay_max_attempts" help:"failed deliveries after which an outbox row is dead (broker outages do not count)"`
	TIMSDKAppID     string        `yaml:"tim_sdkappid" help:"Tencent IM SDKAppID; empty: a local Tencent-compatible endpoint on the API port (/local/ shows what rooms would display)"`
	TIMSecretKey    string        `yaml:"tim_secret_key" help:"Tencent IM secret key for UserSig" secret:"true"`
	TIMAdmin        string        `yaml:"tim_admin" help:"Tencent IM admin identifier"`
	TIMEndpoint     string        `yaml:"tim_endpoint" help:"Tencent IM REST host of the app's region, such as https://adminapisgp.im.qcloud.com"`
	TIMAppBudget    int           `yaml:"tim_app_budget" help:"send_group_msg calls per second Tencent allows the whole app (all rooms, all nodes: shared through redis_url when set)"`
	TIMCallBudget   int           `yaml:"tim_call_budget" help:"calls per second this node makes of each other Tencent IM command (group control)"`
	IMBudget        int           `yaml:"im_group_budget" help:"IM messages per second the service sends to one room's group (Tencent drops above 40)"`
	IMRegional      string        `yaml:"im_regional_groups" help:"region=group pairs, comma-separated: the broadcast group of each region for big gifts"`
	IMRegionalMin   int           `yaml:"im_regional_threshold" help:"gift value from which a gift also shows in its region's broadcast group"`
	RetainVersions  int           `yaml:"retain_versions" help:"command log rows kept below each room's snapshot (also the idempotency horizon)"`
	RetainCommands  time.Duration `yaml:"retain_commands_for" help:"command log rows younger than this are kept"`
	RetainPublished time.Duration `yaml:"retain_published_for" help:"published outbox rows are deleted after this"`
	RetainEvery     time.Duration `yaml:"retention_interval" help:"how often retention runs"`
	RetainGifts     time.Duration `yaml:"retain_gift_records_for" help:"gift records (ListGiftRecords) older than this are deleted (0: kept for ever)"`

	BusinessTZ       string        `yaml:"business_timezone" help:"IANA time zone of the business day (heat, rank, charm and the rocket reset daily there)"`
	BusinessDayStart time.Duration `yaml:"business_day_start" help:"time of day the business day starts in business_timezone (0s: midnight; 4h: 04:00)"`
	RankSize         int           `yaml:"rank_size" help:"length of a room's visible contribution rank"`
	LuckyMaxPayout   int           `yaml:"lucky_max_payout_bp" help:"highest expected lucky payout per coin spent, in basis points; a lucky_table over it refuses to start"`
	LuckyRegionalMin int           `yaml:"lucky_regional_threshold" help:"lucky reward from which a win also shows in its region's broadcast group (0: never)"`
	WalletTimeout    time.Duration `yaml:"wallet_timeout" help:"bound on one wallet charge call"`
	GiftApplyWindow  time.Duration `yaml:"gift_apply_window" help:"a gift whose charge is older than this is not applied (gift_expired); retries inside it commit"`
	ReconcileAfter   time.Duration `yaml:"wallet_reconcile_after" help:"pending charges older than this are settled (gift committed) or refunded (it did not)"`
	RocketScan       time.Duration `yaml:"rocket_scan_interval" help:"how often due rocket launches of rooms not loaded are looked for"`

	// Callers and the limits applied before any work.
	Tokens           string        `yaml:"tokens" help:"callers as name=token:scope+scope;name2=token2:scope (scopes: room, wallet.credit, operator, platform, act-as-any; tokens of at least 32 bytes)" secret:"true"`
	UserJWTKeys      string        `yaml:"user_jwt_keys" help:"keys that verify the user assertions (X-Room-User) of callers without act-as-any: hs256:<secret> or jwks:<JWKS file>" secret:"true"`
	AdminListen      string        `yaml:"admin_listen" help:"address of /metrics, gRPC reflection and /debug/pprof/, which need no credentials (keep it loopback or private; off: not served)"`
	MaxRequestBytes  int           `yaml:"max_request_bytes" help:"largest request message, before and after decompression"`
	MaxConnections   int           `yaml:"max_connections" help:"most open connections to the API port"`
	HTTPReadTimeout  time.Duration `yaml:"http_read_timeout" help:"bound on reading one request, body included"`
	HTTPWriteTimeout time.Duration `yaml:"http_write_timeout" help:"bound on one call, from its headers to the end of its answer"`
	HTTPIdleTimeout  time.Duration `yaml:"http_idle_timeout" help:"an idle keep-alive connection is closed after this"`
	HTTP2MaxStreams  int           `yaml:"http2_max_streams" help:"most calls in flight on one HTTP/2 connection"`
	MaxRooms         int           `yaml:"max_rooms" help:"rooms loaded at once on this node; one more passivates the least recently used idle room (node_full when all are busy)"`
	CreateRoomRate   int           `yaml:"create_room_rate" help:"rooms each caller may create per second on one node, in bursts of twice as many (0: no bound)"`

	// The Go runtime's memory settings.
	GCPercent          int `yaml:"gc_percent" help:"the Go collector's heap growth between collections, in percent of the live heap (GOGC; 0: the runtime's default, 100); the GOGC environment variable wins"`
	MemoryLimitPercent int `yaml:"memory_limit_percent" help:"heap bound the Go collector keeps under, in percent of the container's memory limit (cgroup) or else the machine's memory (GOMEMLIMIT; 0: none); the GOMEMLIMIT environment variable wins"`

	// Presence: members who disconnect without LeaveRoom.
	PresenceTimeout  time.Duration `yaml:"presence_timeout" help:"a member not seen for this long (no Heartbeat, no Tencent IM login, no command of their own) leaves the room; a seated member silent for a third of it counts as offline"`
	MicOfflineGrace  time.Duration `yaml:"mic_offline_grace" help:"a seated member offline (logged out, disconnected or silent) this long loses the seat and stays in the room"`
	TIMCallbackToken string        `yaml:"tim_callback_token" help:"the callback authentication token set in Tencent IM's console; when set, Tencent's callbacks are served at /tim/callback (State.StateChange drives presence); empty: not served" secret:"true"`

	// Lists, set in the YAML file only.
	CallerList   []CallerConfig `yaml:"callers" nested:"true"`
	Gifts        []gift.Gift    `yaml:"gifts" nested:"true"`
	LuckyTable   []gift.Outcome `yaml:"lucky_table" nested:"true"`
	RocketLevels []RocketLevel  `yaml:"rocket_levels" nested:"true"`
}

// CallerConfig is one caller in the config file: its name, its token in
// the clear or the token's SHA-256 in hex (token_sha256, so the file holds
// no secret), and its scopes.
type CallerConfig struct {
	Name        string   `yaml:"name"`
	Token       string   `yaml:"token"`
	TokenSHA256 string   `yaml:"token_sha256"`
	Scopes      []string `yaml:"scopes"`
}

// RocketLevel is one rocket level: the fuel (gift value) that ignites it
// and the countdown from ignition to launch.
type RocketLevel struct {
	Fuel      int64         `yaml:"fuel"`
	Countdown time.Duration `yaml:"countdown"`
}

// Default returns the zero-configuration settings: loopback only, SQLite
// under ./data.
func Default() Config {
	return Config{
		Listen: "127.0.0.1:8080", GRPCListen: "127.0.0.1:9090", GRPCBusyRead: 20 * time.Millisecond, DataDir: "./data", LogLevel: "info", LogFormat: "text", SQLiteSync: "FULL",
		SnapshotEvery: 500, MailboxSize: 4096, MaxBatch: 256, BatchLinger: 2 * time.Millisecond, CommitLinger: time.Millisecond,
		LeaseTTL: 5 * time.Second, DrainGrace: 2 * time.Second,
		IdleTimeout: 10 * time.Minute, CommitTimeout: 5 * time.Second, ShutdownTimeout: 30 * time.Second,
		NATSStream: "ROOM_EVENTS", NATSSubjects: "room.events", NATSFastBatches: "embedded", RelayAttempts: 10, TIMAppBudget: 200, TIMCallBudget: 200, IMBudget: 20, IMRegionalMin: 10_000,
		RetainVersions: 10_000, RetainCommands: 7 * 24 * time.Hour, RetainPublished: 3 * 24 * time.Hour, RetainEvery: time.Minute, RetainGifts: 90 * 24 * time.Hour,
		BusinessTZ: "UTC", RankSize: 10, LuckyMaxPayout: 9_500, LuckyRegionalMin: 10_000,
		WalletTimeout: 3 * time.Second, GiftApplyWindow: 30 * time.Second, ReconcileAfter: 2 * time.Minute, RocketScan: time.Second,
		Gifts: gift.DefaultGifts(), LuckyTable: gift.DefaultLucky(), RocketLevels: defaultRocketLevels(),
		AdminListen: "127.0.0.1:0", MaxRequestBytes: 1 << 20, MaxConnections: 4096,
		HTTPReadTimeout: 10 * time.Second, HTTPWriteTimeout: 30 * time.Second, HTTPIdleTimeout: 2 * time.Minute, HTTP2MaxStreams: 250, CreateRoomRate: 20, MaxRooms: 100_000,
		PresenceTimeout: 90 * time.Second, MicOfflineGrace: 30 * time.Second,
		GCPercent: 400, MemoryLimitPercent: 80,
	}
}

// Callers returns the configured callers: token (scopes room and
// act-as-any, named "token"), tokens and callers. None: no credentials are
// configured. Validate reports their problems.
func (c Config) Callers() ([]auth.Caller, error) {
	var out []auth.Caller
	var p []error
	if c.Token != "" {
		if tc, err := auth.NewCaller("token", c.Token, []auth.Scope{auth.Room, auth.ActAsAny}); err != nil {
			p = append(p, fmt.Errorf("token (ROOM_TOKEN): %w", err))
		} else {
			out = append(out, tc)
		}
	}
	list, err := auth.ParseTokens(c.Tokens)
	switch {
	case err != nil:
		p = append(p, fmt.Errorf("tokens (ROOM_TOKENS): %w", err))
	case c.Tokens != "" && len(list) == 0:
		// Only separators or spaces: an empty secret in a template.
		p = append(p, errors.New("tokens (ROOM_TOKENS) is set but names no caller"))
	}
	out = append(out, list...)
	for i, cc := range c.CallerList {
		scopes, err := auth.ParseScopes(cc.Scopes)
		if err != nil {
			p = append(p, fmt.Errorf("callers[%d] %q: %w", i, cc.Name, err))
			continue
		}
		switch {
		case (cc.Token == "") == (cc.TokenSHA256 == ""):
			p = append(p, fmt.Errorf("callers[%d] %q: set token or token_sha256, not both", i, cc.Name))
		case cc.Token != "":
			caller, err := auth.NewCaller(cc.Name, cc.Token, scopes)
			if err != nil {
				p = append(p, fmt.Errorf("callers[%d]: %w", i, err))
				continue
			}
			out = append(out, caller)
		default:
			h, err := auth.ParseHash(cc.TokenSHA256)
			if err != nil {
				p = append(p, fmt.Errorf("callers[%d] %q: token_sha256: %w", i, cc.Name, err))
				continue
			}
			out = append(out, auth.Caller{Name: cc.Name, Hash: h, Scopes: scopes})
		}
	}
	if _, err := auth.NewCallers(out); err != nil {
		p = append(p, err)
	}
	return out, errors.Join(p...)
}

// UserKeys returns the keys of the user assertions; nil when none are
// configured. Validate reports their problems.
func (c Config) UserKeys() (*auth.UserKeys, error) {
	if c.UserJWTKeys == "" {
		return nil, nil
	}
	return auth.ParseUserKeys(c.UserJWTKeys)
}

// validateCallers checks the callers, the user keys and what needs them.
func (c Config) validateCallers() []error {
	var p []error
	callers, err := c.Callers()
	if err != nil {
		p = append(p, err)
	}
	if _, err := c.UserKeys(); err != nil {
		p = append(p, err)
	}
	for _, cl := range callers {
		if cl.Has(auth.Room) && !cl.Has(auth.ActAsAny) && c.UserJWTKeys == "" {
			p = append(p, fmt.Errorf("caller %q has the room scope without act-as-any: set user_jwt_keys (ROOM_USER_JWT_KEYS) to verify the users it asserts", cl.Name))
		}
	}
	if c.AdminListen != "off" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			p = append(p, fmt.Errorf("admin_listen %q: %v (off: not served)", c.AdminListen, err))
		}
	}
	return p
}

func defaultRocketLevels() []RocketLevel {
	var out []RocketLevel
	for _, l := range room.DefaultRules().RocketLevels {
		out = append(out, RocketLevel{Fuel: l.Fuel, Countdown: l.Countdown})
	}
	return out
}

// Catalogue builds the gift catalogue; Validate reports its problems.
func (c Config) Catalogue() (*gift.Catalogue, error) {
	return gift.New(c.Gifts, gift.Settings{
		Lucky: c.LuckyTable, MaxPayoutBP: int64(c.LuckyMaxPayout),
		RegionalThreshold: int64(c.IMRegionalMin), LuckyRegionalThreshold: int64(c.LuckyRegionalMin),
	})
}

// Limits of the economy settings: those a room accepts in a logged SetRules.
const (
	maxRocketLevels = room.MaxRocketLevels
	maxRocketFuel   = room.MaxRocketFuel
	maxCountdown    = room.MaxCountdown
)

// Rules builds the rooms' economy rules; Validate reports their problems.
func (c Config) Rules() (*room.Rules, error) {
	var p []error
	loc, err := room.LoadZone(c.BusinessTZ)
	if err != nil || c.BusinessTZ == "" || c.BusinessTZ == "Local" {
		p = append(p, fmt.Errorf("business_timezone %q is not an IANA time zone such as Asia/Riyadh", c.BusinessTZ))
	}
	if c.BusinessDayStart < 0 || c.BusinessDayStart >= 24*time.Hour {
		p = append(p, fmt.Errorf("business_day_start %v is outside 0s..24h", c.BusinessDayStart))
	}
	if len(c.RocketLevels) > maxRocketLevels {
		p = append(p, fmt.Errorf("rocket_levels: %d levels, at most %d", len(c.RocketLevels), maxRocketLevels))
	}
	r := &room.Rules{Location: loc, DayStart: c.BusinessDayStart, RankSize: c.RankSize}
	for i, l := range c.RocketLevels {
		if l.Fuel <= 0 || l.Fuel > maxRocketFuel {
			p = append(p, fmt.Errorf("rocket_levels[%d]: fuel %d is outside 1..%d", i, l.Fuel, int64(maxRocketFuel)))
		}
		if l.Countdown < 0 || l.Countdown > maxCountdown {
			p = append(p, fmt.Errorf("rocket_levels[%d]: countdown %v is outside 0s..%v", i, l.Countdown, maxCountdown))
		}
		r.RocketLevels = append(r.RocketLevels, room.RocketLevel{Fuel: l.Fuel, Countdown: l.Countdown})
	}
	return r, errors.Join(p...)
}

// Load builds the configuration from defaults, the file named by -config or
// ROOM_CONFIG, the environment and args (without the program name).
func Load(args []string, getenv func(string) string) (Config, error) {
	// A first pass over the flags finds -config and reports bad usage early;
	// the flags are applied again last, so they win over file and environment.
	var probe Config
	var problems []error
	path := getenv("ROOM_CONFIG")
	probeFlags := flagSet(&probe, &path, io.Discard)
	switch err := probeFlags.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		flagSet(&probe, new(string), os.Stderr).Usage()
		return probe, err
	case err != nil:
		problems = append(problems, err) // reported with everything else below
	case probeFlags.NArg() > 0:
		problems = append(problems, fmt.Errorf("unexpected arguments: %v", probeFlags.Args()))
	}
	cfg := Default()
	if path != "" {
		if err := loadFile(&cfg, path); err != nil {
			problems = append(problems, err)
		}
	}
	for _, f := range fields(&cfg) {
		if v := getenv(f.env()); v != "" {
			if err := f.set(v); err != nil {
				problems = append(problems, fmt.Errorf("%s: %w", f.env(), err))
			}
		}
	}
	if len(problems) == 0 { // a bad flag was reported by the probe already
		if err := flagSet(&cfg, new(string), io.Discard).Parse(args); err != nil {
			problems = append(problems, err)
		}
	} else {
		_ = flagSet(&cfg, new(string), io.Discard).Parse(args) // apply the flags that parse
	}
	problems = append(problems, cfg.Validate())
	return cfg, errors.Join(problems...)
}

// flagSet binds every setting of cfg to a flag, and -config to path.
func flagSet(cfg *Config, path *string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("room-service", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(path, "config", *path, "optional YAML config file (ROOM_CONFIG)")
	for _, f := range fields(cfg) {
		fs.Func(strings.ReplaceAll(f.key, "_", "-"), f.help+" ("+f.env()+")", f.set)
	}
	return fs
}

func loadFile(cfg *Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	var p []error
	p = append(p, c.validateListen("listen", c.Listen)...)
	if c.GRPCListen != "off" {
		p = append(p, c.validateListen("grpc_listen", c.GRPCListen)...)
	}
	p = append(p, c.validateCallers()...)
	if !oneOf(c.NATSFastBatches, "embedded", "on", "off") {
		p = append(p, fmt.Errorf("nats_fast_batches %q: want embedded, on or off", c.NATSFastBatches))
	}
	if c.NATSURL != "" && (c.NATSListen != "" || c.NATSToken != "") {
		p = append(p, errors.New("nats_listen and nats_token are for the embedded server; they cannot go with nats_url"))
	}
	if host, _, err := net.SplitHostPort(c.NATSListen); err == nil && c.NATSToken == "" && !isLoopback(host) {
		p = append(p, fmt.Errorf("nats_listen %q is not a loopback address: set nats_token (ROOM_NATS_TOKEN), or anyone who reaches it could publish room events", c.NATSListen))
	}
	if c.NATSToken != "" && len(c.NATSToken) < auth.MinTokenLen {
		p = append(p, fmt.Errorf("nats_token is %d bytes; at least %d are required", len(c.NATSToken), auth.MinTokenLen))
	}
	if t := c.TIMCallbackToken; t != strings.TrimSpace(t) {
		// A secret rendered with its file's newline, or an empty one as
		// spaces: Tencent signs with the token set in its console.
		p = append(p, errors.New("tim_callback_token (ROOM_TIM_CALLBACK_TOKEN) begins or ends with white space"))
	}
	p = append(p, c.validateFleet()...)
	if _, err := c.RegionalGroups(); err != nil {
		p = append(p, err)
	}
	if _, err := c.Catalogue(); err != nil {
		p = append(p, err)
	}
	if _, err := c.Rules(); err != nil {
		p = append(p, err)
	}
	if c.RetainCommands <= c.ReconcileAfter {
		p = append(p, fmt.Errorf("retain_commands_for %v must exceed wallet_reconcile_after %v: the reconciler reads the log to tell a committed gift from a lost one",
			c.RetainCommands, c.ReconcileAfter))
	}
	if c.ReconcileAfter <= c.GiftApplyWindow+c.CommitTimeout+c.WalletTimeout {
		p = append(p, fmt.Errorf("wallet_reconcile_after %v must exceed gift_apply_window + commit_timeout + wallet_timeout (%v): a charge is refunded only once its gift can no longer commit",
			c.ReconcileAfter, c.GiftApplyWindow+c.CommitTimeout+c.WalletTimeout))
	}
	if c.TIMSDKAppID != "" {
		if _, err := strconv.ParseUint(c.TIMSDKAppID, 10, 64); err != nil {
			p = append(p, fmt.Errorf("tim_sdkappid %q is not a number", c.TIMSDKAppID))
		}
		if c.TIMSecretKey == "" || c.TIMAdmin == "" || c.TIMEndpoint == "" {
			p = append(p, errors.New("with tim_sdkappid set, tim_secret_key, tim_admin and tim_endpoint are required"))
		}
	}
	if c.DataDir == "" {
		p = append(p, errors.New("data_dir is empty"))
	}
	if len(c.NodeID) > maxNodeID {
		p = append(p, fmt.Errorf("node_id is %d bytes; at most %d fit a room's owner (rooms.owner_node)", len(c.NodeID), maxNodeID))
	}
	if !oneOf(strings.ToLower(c.LogLevel), "debug", "info", "warn", "error") {
		p = append(p, fmt.Errorf("log_level %q is not debug, info, warn or error", c.LogLevel))
	}
	if !oneOf(c.LogFormat, "text", "json") {
		p = append(p, fmt.Errorf("log_format %q is not text or json", c.LogFormat))
	}
	if !oneOf(strings.ToUpper(c.SQLiteSync), "FULL", "NORMAL") {
		p = append(p, fmt.Errorf("sqlite_synchronous %q is not FULL or NORMAL", c.SQLiteSync))
	}
	for _, n := range []struct {
		key      string
		v        int
		min, max int
	}{
		{"snapshot_every", c.SnapshotEvery, 1, 1_000_000}, {"mailbox_size", c.MailboxSize, 1, 1 << 20},
		{"max_batch", c.MaxBatch, 1, 65536}, {"commit_workers", c.CommitWorkers, 0, 256},
		{"retain_versions", c.RetainVersions, 0, 1 << 30}, {"relay_max_attempts", c.RelayAttempts, 1, 1000},
		{"im_group_budget", c.IMBudget, 1, 40}, {"tim_app_budget", c.TIMAppBudget, 1, 1_000_000},
		{"tim_call_budget", c.TIMCallBudget, 1, 1_000_000}, {"im_regional_threshold", c.IMRegionalMin, 0, 1 << 30},
		{"rank_size", c.RankSize, 1, 100}, {"lucky_max_payout_bp", c.LuckyMaxPayout, 0, 10_000},
		{"max_request_bytes", c.MaxRequestBytes, 1 << 10, 64 << 20}, {"max_connections", c.MaxConnections, 1, 1 << 20},
		{"http2_max_streams", c.HTTP2MaxStreams, 1, 10_000}, {"create_room_rate", c.CreateRoomRate, 0, 100_000},
		{"max_rooms", c.MaxRooms, 1, 10_000_000}, {"gc_percent", c.GCPercent, 0, 10_000}, {"memory_limit_percent", c.MemoryLimitPercent, 0, 100},
		{"lucky_regional_threshold", c.LuckyRegionalMin, 0, 1 << 30},
	} {
		if n.v < n.min || n.v > n.max {
			p = append(p, fmt.Errorf("%s %d is outside %d..%d", n.key, n.v, n.min, n.max))
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"idle_timeout", c.IdleTimeout}, {"commit_timeout", c.CommitTimeout}, {"shutdown_timeout", c.ShutdownTimeout},
		{"retain_commands_for", c.RetainCommands}, {"retain_published_for", c.RetainPublished}, {"retention_interval", c.RetainEvery},
		{"wallet_timeout", c.WalletTimeout}, {"gift_apply_window", c.GiftApplyWindow},
		{"wallet_reconcile_after", c.ReconcileAfter}, {"rocket_scan_interval", c.RocketScan},
		{"http_read_timeout", c.HTTPReadTimeout}, {"http_write_timeout", c.HTTPWriteTimeout}, {"http_idle_timeout", c.HTTPIdleTimeout},
	} {
		if d.v <= 0 {
			p = append(p, fmt.Errorf("%s must be positive, got %v", d.key, d.v))
		}
	}
	if c.BatchLinger != 0 && (c.BatchLinger < 100*time.Microsecond || c.BatchLinger > 50*time.Millisecond) {
		p = append(p, fmt.Errorf("batch_linger %v is neither 0 (off) nor within 100us..50ms", c.BatchLinger))
	}
	if c.CommitLinger != 0 && (c.CommitLinger < 100*time.Microsecond || c.CommitLinger > 50*time.Millisecond) {
		p = append(p, fmt.Errorf("commit_linger %v is neither 0 (off) nor within 100us..50ms", c.CommitLinger))
	}
	if c.GRPCBusyRead != 0 && (c.GRPCBusyRead < time.Millisecond || c.GRPCBusyRead > time.Second) {
		p = append(p, fmt.Errorf("grpc_busy_read %v is neither 0 (off) nor within 1ms..1s", c.GRPCBusyRead))
	}
	if c.RetainGifts < 0 {
		p = append(p, fmt.Errorf("retain_gift_records_for may not be negative, got %v", c.RetainGifts))
	}
	if c.PresenceTimeout < minPresenceTimeout || c.PresenceTimeout > maxPresence {
		p = append(p, fmt.Errorf("presence_timeout %v is outside %v..%v", c.PresenceTimeout, minPresenceTimeout, maxPresence))
	} else if c.IdleTimeout > 0 && c.PresenceTimeout >= c.IdleTimeout {
		// Presence runs in a loaded room only: a room unloaded for idleness
		// with members nobody sees would keep them, and list them online,
		// until something loads it again.
		p = append(p, fmt.Errorf("presence_timeout %v must be shorter than idle_timeout %v: a member nobody sees leaves a loaded room before it unloads", c.PresenceTimeout, c.IdleTimeout))
	}
	if c.MicOfflineGrace < time.Second || c.MicOfflineGrace > maxPresence {
		p = append(p, fmt.Errorf("mic_offline_grace %v is outside 1s..%v", c.MicOfflineGrace, maxPresence))
	}
	for _, id := range c.PlatformUsers {
		if id <= 0 {
			p = append(p, fmt.Errorf("platform_operators holds %d; user ids are positive", id))
		}
	}
	return errors.Join(p...)
}

// maxNodeID bounds node_id: the node is stored as the owner of the rooms it
// claims (rooms.owner_node, VARCHAR(128) on MySQL) and named by Drain.
const maxNodeID = 128

// Bounds of the presence settings: a heartbeat every 30 s or so needs a
// timeout well above it.
const (
	minPresenceTimeout = 3 * time.Second
	maxPresence        = 24 * time.Hour
)

// validateListen checks an address the API is served on: without
// credentials, only a loopback address may serve it.
func (c Config) validateListen(name, addr string) []error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return []error{fmt.Errorf("%s %q: %v", name, addr, err)}
	}
	if !c.HasCredentials() && !isLoopback(host) {
		return []error{fmt.Errorf("%s %q is not a loopback address: set credentials (ROOM_TOKENS or ROOM_TOKEN) before exposing the service", name, addr)}
	}
	return nil
}

// HasCredentials reports whether any caller credential is configured: a
// caller that token, tokens or callers name, as the API counts them.
// Without one every call is served, which only a loopback listen allows.
func (c Config) HasCredentials() bool {
	callers, _ := c.Callers() // Validate reports their problems
	return len(callers) > 0
}

// Development reports whether the service runs as a development server:
// the API on a loopback address and no credentials. Only then are the
// development endpoints (the local Tencent IM endpoint's /local/ pages)
// and the admin surface served on the API port.
func (c Config) Development() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	return err == nil && isLoopback(host) && !c.HasCredentials()
}

// Bounds of lease_ttl: below a second a Redis hiccup or a GC pause loses
// rooms; above a minute a crashed node's rooms wait too long.
const (
	minLeaseTTL = time.Second
	maxLeaseTTL = time.Minute
)

// validateFleet checks the settings of fleet mode (redis_url set): the
// nodes must share the database and the message queue, and reach each other.
func (c Config) validateFleet() []error {
	var p []error
	if c.LeaseTTL < minLeaseTTL || c.LeaseTTL > maxLeaseTTL {
		p = append(p, fmt.Errorf("lease_ttl %v is outside %v..%v", c.LeaseTTL, minLeaseTTL, maxLeaseTTL))
	}
	if c.DrainGrace < 0 || c.DrainGrace > c.ShutdownTimeout/2 {
		p = append(p, fmt.Errorf("drain_grace %v is outside 0..shutdown_timeout/2 (%v): the rooms' hand-off needs the rest", c.DrainGrace, c.ShutdownTimeout/2))
	}
	if strings.Contains(c.RedisKeyPrefix, "{") {
		p = append(p, fmt.Errorf("redis_key_prefix %q holds '{' (a key's hash tag is the room id)", c.RedisKeyPrefix))
	}
	if c.RedisURL == "" {
		return p
	}
	if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		p = append(p, errors.New("redis_url is not a redis:// or rediss:// URL with a host, such as redis://127.0.0.1:6379/0"))
	}
	if c.MySQLDSN == "" {
		p = append(p, errors.New("fleet mode (redis_url) needs a MySQL database shared by the nodes: set mysql_dsn (SQLite belongs to one node)"))
	}
	if c.NATSURL == "" {
		p = append(p, errors.New("fleet mode (redis_url) needs a NATS server shared by the nodes: set nats_url (the embedded server belongs to one node)"))
	}
	if strings.Contains(c.NodeID, "|") {
		p = append(p, fmt.Errorf("node_id %q holds '|', which lease tokens use as separator", c.NodeID))
	}
	host, port, err := net.SplitHostPort(c.AdvertiseAddr)
	switch {
	case c.AdvertiseAddr == "":
		p = append(p, errors.New("fleet mode (redis_url) needs advertise_addr: the host:port other nodes reach this node's API on"))
	case err != nil:
		p = append(p, fmt.Errorf("advertise_addr %q: %v", c.AdvertiseAddr, err))
	case host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified():
		p = append(p, fmt.Errorf("advertise_addr %q names no host other nodes can reach (not 0.0.0.0 or ::)", c.AdvertiseAddr))
	case !validPort(port):
		p = append(p, fmt.Errorf("advertise_addr %q needs a port, 1..65535", c.AdvertiseAddr))
	}
	return p
}

// validPort reports whether port is a TCP port other nodes can dial.
func validPort(port string) bool {
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n > 0
}

// RegionalGroups parses im_regional_groups ("sg=group-sg,us=group-us").
func (c Config) RegionalGroups() (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(c.IMRegional, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		region, group, ok := strings.Cut(pair, "=")
		if !ok || region == "" || group == "" {
			return nil, fmt.Errorf("im_regional_groups: %q is not region=group", pair)
		}
		out[region] = group
	}
	return out, nil
}

// Redacted returns the settings as key=value pairs for logs, secrets masked.
func (c Config) Redacted() []any {
	var out []any
	for _, f := range fields(&c) {
		v := f.get()
		if f.secret && v != "" {
			v = "<redacted>"
		}
		out = append(out, f.key, v)
	}
	return out
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func oneOf(v string, options ...string) bool {
	for _, o := range options {
		if v == o {
			return true
		}
	}
	return false
}

// field is one setting, reached by reflection over Config's tags.
type field struct {
	key, help string
	secret    bool
	set       func(string) error
	get       func() string
}

func (f field) env() string { return "ROOM_" + strings.ToUpper(f.key) }

func fields(cfg *Config) []field {
	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		sf, fv := t.Field(i), v.Field(i)
		if sf.Tag.Get("nested") == "true" {
			continue // a list of records: YAML only
		}
		f := field{key: sf.Tag.Get("yaml"), help: sf.Tag.Get("help"), secret: sf.Tag.Get("secret") == "true"}
		f.get = func() string { return fmt.Sprint(fv.Interface()) }
		switch fv.Interface().(type) {
		case string:
			f.set = func(s string) error { fv.SetString(s); return nil }
		case int:
			f.set = func(s string) error {
				n, err := strconv.Atoi(s)
				if err != nil {
					return fmt.Errorf("not a whole number: %q", s)
				}
				fv.SetInt(int64(n))
				return nil
			}
		case time.Duration:
			f.set = func(s string) error {
				d, err := time.ParseDuration(s)
				if err != nil {
					return fmt.Errorf("not a duration such as 30s or 10m: %q", s)
				}
				fv.SetInt(int64(d))
				return nil
			}
		case []int64:
			f.set = func(s string) error {
				var ids []int64
				for _, part := range strings.Split(s, ",") {
					if part = strings.TrimSpace(part); part == "" {
						continue
					}
					id, err := strconv.ParseInt(part, 10, 64)
					if err != nil {
						return fmt.Errorf("not a list of user ids: %q", s)
					}
					ids = append(ids, id)
				}
				fv.Set(reflect.ValueOf(ids))
				return nil
			}
		default:
			panic(fmt.Sprintf("config field %s has an unsupported type", sf.Name))
		}
		out = append(out, f)
	}
	return out
}
