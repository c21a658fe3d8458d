// Package natsbus publishes outbox records to NATS JetStream, and runs the
// embedded NATS server that is room-service's zero-configuration broker.
//
// Every record becomes one message on the subject
// <prefix>.<event type>.<RoomToken(room id)> of one stream, carrying a
// protobuf room.v1.RoomEvent and the header Nats-Msg-Id = event_id, so
// JetStream drops a re-published record inside the stream's duplicate window,
// and LastOfRoom tells the relay which of a room's records the stream holds.
// The relay that calls Publish owns ordering (one room's records in
// (room_version, seq) order) and retries; this package only guarantees that a
// nil error means the broker stored the message (or already had it).
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/outbox"
)

// Defaults applied by Open to the zero fields of a Config.
const (
	DefaultStream         = "ROOM_EVENTS"
	DefaultSubjectPrefix  = "room.events"
	DefaultDuplicates     = time.Minute
	DefaultMaxAge         = 7 * 24 * time.Hour
	DefaultReplicas       = 1
	DefaultPublishTimeout = 5 * time.Second

	// MinDuplicates is the shortest duplicate window Open accepts. A relay
	// that died between the broker's ack and marking the rows does not
	// need it, however long it was away: it asks the stream what it holds
	// (LastOfRoom) before publishing them again. The window drops what
	// that cannot see: the message or fast batch a relay had in flight when
	// its room moved to another relay (a message lands within
	// PublishTimeout, a fast batch within about three: its first ack, its
	// commit, and its end; the window must be four at least), and the
	// copies of a row queued while the connection was down, which go out
	// together when it is back. Every message id inside the window is held
	// in the server's memory (about 190 bytes each: 116 MB at 5,000 events/s
	// over two minutes, in the service's own heap with the embedded server,
	// where the collector marks it every cycle).
	MinDuplicates = 30 * time.Second
)

const (
	// reconnectBufSize bounds what a disconnected connection buffers; a
	// publish beyond it fails at once and the relay retries the row later.
	reconnectBufSize = 8 << 20
	// drainTimeout bounds Close: unacknowledged work is the relay's to retry.
	drainTimeout = 5 * time.Second
	// startTimeout bounds the embedded server's start when ctx has no deadline.
	startTimeout = 30 * time.Second
)

// ErrInvalidConfig is wrapped by every problem Config.Validate reports.
var ErrInvalidConfig = errors.New("natsbus: invalid config")

// Config selects the broker and the stream. The zero value of every field but
// StoreDir (or URL) means its default.
type Config struct {
	// URL is an external server or cluster, comma separated
	// ("nats://a:4222,nats://b:4222"). Empty runs an embedded server.
	URL string
	// StoreDir is the embedded server's JetStream storage directory; required
	// when URL is empty, refused when it is set.
	StoreDir string
	// Listen is the embedded server's client address, such as
	// "127.0.0.1:4333" (port 0 picks a free one), so that consumers outside
	// the process can attach. Empty opens no port: the Bus talks to the
	// server in-process.
	Listen string
	// Token, for the embedded server, is the token every client must
	// present (nats://<token>@host:port), the Bus's own in-process
	// connection included. Empty: the server takes anyone who reaches it.
	Token string
	// Stream is the JetStream stream name, default "ROOM_EVENTS".
	Stream string
	// SubjectPrefix is the stream's subject prefix, default "room.events";
	// the stream captures "<SubjectPrefix>.>".
	SubjectPrefix string
	// Duplicates is the stream's dedup window, default 1m, at least
	// MinDuplicates (see there).
	Duplicates time.Duration
	// MaxAge is how long the stream keeps a message, default 7 days.
	MaxAge time.Duration
	// Replicas is the stream's replication factor, default 1; use 3 on a
	// production cluster. The embedded server allows only 1.
	Replicas int
	// PublishTimeout bounds one Publish's wait for the broker's ack,
	// default 5s.
	PublishTimeout time.Duration
	// Name is the client connection's name (and the embedded server's).
	Name string
	// FastBatches has PublishInOrder send a run of a room's rows as one
	// JetStream fast batch (see publishRun), and the stream made or updated
	// to allow them; false makes or updates it without. Every server that
	// holds the stream must run NATS 2.14 or later: an older one that loads
	// a stream allowing them marks it offline.
	FastBatches bool
	// SyncInterval is how often the embedded server fsyncs its store. Zero
	// keeps the server's default (2 minutes): a killed process loses
	// nothing, but an OS crash or power loss can lose the last interval's
	// acknowledged messages. Negative fsyncs every message, which is far
	// slower. An external server's setting is the server's own.
	SyncInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	return c
}

// Validate reports every problem of c, after defaults, at once; each one
// wraps ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	embedded := c.URL == ""
	switch {
	case embedded && c.StoreDir == "":
		bad("store dir is required for the embedded server (no url)")
	case !embedded && c.StoreDir != "":
		bad("store dir is for the embedded server only, but url is set")
	}
	if !embedded && c.Listen != "" {
		bad("listen is for the embedded server only, but url is set")
	}
	if !embedded && c.Token != "" {
		bad("token is for the embedded server only, but url is set (put an external server's credentials in its url)")
	}
	if c.Listen != "" {
		if _, _, err := splitListen(c.Listen); err != nil {
			bad("listen %q: %v", c.Listen, err)
		}
	}
	if c.Stream == "" || strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		bad("stream name %q must be one token without spaces, '.', '*', '>' or path separators", c.Stream)
	}
	if !validPrefix(c.SubjectPrefix) {
		bad("subject prefix %q must be dot-separated non-empty tokens without wildcards or spaces", c.SubjectPrefix)
	}
	if c.Duplicates < MinDuplicates {
		bad("duplicate window %s is shorter than %s (a relay restart must fit in it)", c.Duplicates, MinDuplicates)
	}
	if c.MaxAge < c.Duplicates {
		bad("max age %s is shorter than the duplicate window %s", c.MaxAge, c.Duplicates)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		bad("replicas %d must be between 1 and 5", c.Replicas)
	} else if embedded && c.Replicas != 1 {
		bad("replicas %d: the embedded server is a single node", c.Replicas)
	}
	if c.PublishTimeout < 0 {
		bad("publish timeout %s is negative", c.PublishTimeout)
	} else if c.Duplicates >= MinDuplicates && c.Duplicates < 4*c.PublishTimeout {
		bad("duplicate window %s is shorter than four publish timeouts (%s): a fast batch in flight when its room moves must land in it", c.Duplicates, c.PublishTimeout)
	}
	if !embedded && c.SyncInterval != 0 {
		bad("sync interval is for the embedded server only, but url is set")
	}
	return errors.Join(errs...)
}

func validPrefix(p string) bool {
	if p == "" {
		return false
	}
	for tok := range strings.SplitSeq(p, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return false
		}
	}
	return true
}

// Bus publishes outbox records to one JetStream stream. It is safe for
// concurrent use. It owns its connection and, in embedded mode, the server;
// Close releases both.
type Bus struct {
	cfg   Config
	log   *slog.Logger
	srv   *server.Server // nil with an external URL
	nc    *nats.Conn
	js    jetstream.JetStream
	order *inOrder    // PublishInOrder's
	runs  atomic.Bool // the stream takes fast batches: PublishInOrder sends long runs as one
	// gather sends short sequences of many rooms as fast batches; nil
	// when the stream takes none.
	gather *gatherer

	runsSent atomic.Int64  // fast batches acknowledged whole
	closed   chan struct{} // closed by the connection's ClosedHandler

	streamMu sync.Mutex
	streamH  jetstream.Stream // LastOfRoom's, once looked up

	remakeMu sync.Mutex // held by the one remake under way
	remadeAt time.Time  // when remake last looked for the stream

	closeOnce sync.Once
	closeErr  error
}

// Open connects to the broker cfg names, or starts the embedded one, and
// creates or updates the stream: subjects "<SubjectPrefix>.>", file storage,
// the duplicate window, MaxAge, Replicas, discard old. An external
// connection reconnects forever and logs its disconnects and reconnects; the
// first connect fails fast. ctx bounds the start, not the Bus's life. A nil
// log means slog.Default().
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "natsbus", "stream", cfg.Stream)
	b := &Bus{cfg: cfg, log: log, closed: make(chan struct{})}

	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), // a broker back after an outage is found quickly
		nats.ReconnectBufSize(reconnectBufSize),
		nats.DrainTimeout(drainTimeout),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats async error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("nats async error", "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(b.closed) }),
	}
	url := cfg.URL
	if url == "" {
		srv, err := startServer(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		b.srv = srv
		// In-process even when a client port is open: the Bus's own traffic
		// never touches the network stack.
		opts = append(opts, nats.InProcessServer(srv))
		if cfg.Token != "" {
			opts = append(opts, nats.Token(cfg.Token))
		}
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		b.shutdownServer()
		return nil, fmt.Errorf("connect nats %s: %w", redactURL(url), err)
	}
	b.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b.js = js
	if b.order, err = newInOrder(nc, b); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err = b.createStream(ctx); err != nil {
		_ = b.Close()
		return nil, err
	}
	if b.runs.Load() {
		b.gather = newGatherer()
		go b.gather.run(b)
	}
	log.Info("nats bus open", "embedded", b.srv != nil, "subjects", cfg.SubjectPrefix+".>", "client_url", b.ClientURL(),
		"runs", b.runs.Load())
	return b, nil
}

// createStream creates or updates the stream, allowing fast batches
// (PublishInOrder's runs) when the config asks for them. A server that
// refuses them keeps the stream without, with a warning; one that predates
// them ignores the setting. Either way every row then goes on its own.
func (b *Bus) createStream(ctx context.Context) error {
	cfg := jetstream.StreamConfig{
		Name:              b.cfg.Stream,
		Description:       "room-service durable room events (outbox)",
		Subjects:          []string{b.cfg.SubjectPrefix + ".>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		Duplicates:        b.cfg.Duplicates,
		MaxAge:            b.cfg.MaxAge,
		Replicas:          b.cfg.Replicas,
		AllowBatchPublish: b.cfg.FastBatches,
	}
	s, err := b.js.CreateOrUpdateStream(ctx, cfg)
	var refused *jetstream.APIError
	if cfg.AllowBatchPublish && errors.As(err, &refused) {
		b.log.Warn("the server refused fast batches: every row goes on its own", "err", err)
		cfg.AllowBatchPublish = false
		s, err = b.js.CreateOrUpdateStream(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("create or update stream %s: %w", b.cfg.Stream, err)
	}
	b.runs.Store(s.CachedInfo().Config.AllowBatchPublish)
	return nil
}

// Publish stores r in the stream and waits, at most PublishTimeout, for the
// broker's ack. It returns nil once the broker has the message, including
// when it already had it (a duplicate inside the window). An error means the
// message may or may not be stored: retry with the same record. A record
// Encode refuses gives ErrInvalidRecord, wrapped.
func (b *Bus) Publish(ctx context.Context, r outbox.Record) error {
	msg, err := b.message(r)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	if sc := trace.SpanContextFromContext(pctx); sc.IsSampled() {
		msg.Header[HeaderTraceParent] = []string{obs.FormatTraceParent(sc)} // the publish's own span
	}
	// ExpectStream makes the broker refuse the message if the subject were
	// ever captured by another stream, instead of acking it there.
	if _, err := b.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(b.cfg.Stream)); err != nil {
		b.remake(ctx, err)
		return publishErr(r, err)
	}
	return nil
}

// remakeEvery bounds how often publishes that found no stream look for it.
const remakeEvery = time.Second

// remake makes the stream again, as Open made it, when a publish failed
// for want of a stream to take it: an operator deleted it, or a broker
// lost its store. Without it every row would wait, pending, until the
// process restarts. It looks at most once a remakeEvery, one caller at a
// time, and leaves alone a stream that is there (no responder for a moment,
// as while a cluster elects the stream's leader): the publish is retried
// by the relay either way (the error is transient).
func (b *Bus) remake(ctx context.Context, err error) {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
		return
	}
	if !b.remakeMu.TryLock() {
		return // another caller looks
	}
	defer b.remakeMu.Unlock()
	if time.Since(b.remadeAt) < remakeEvery {
		return
	}
	b.remadeAt = time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	if _, err := b.js.Stream(ctx, b.cfg.Stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if err := b.createStream(ctx); err != nil {
		b.log.Error("the stream is missing and could not be made again", "err", err)
		return
	}
	b.log.Warn("the stream was missing: made again; the events it held are gone")
}

// LastOfRoom returns the event id of the last message the stream holds for
// roomID, of any event type, and whether it holds one. The relay asks it
// before it publishes rows it cannot know went out (read from the table
// after a restart, a hand-off or a failure): a room's rows are published
// one at a time, each after the one before was acknowledged, so that
// message and every pending row before it are in the stream already. This
// is what keeps a relay that died between the broker's ack and marking the
// rows from publishing them twice, however long it was away, without a
// duplicate window that long.
func (b *Bus) LastOfRoom(ctx context.Context, roomID string) (eventID string, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	s, err := b.stream(ctx)
	if err != nil {
		return "", false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, b.RoomFilter(roomID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("last message of room %s: %w", roomID, err)
	}
	if id := m.Header.Get(HeaderMsgID); id != "" {
		return id, true, nil
	}
	ev, err := Decode(m.Data)
	if err != nil {
		return "", false, fmt.Errorf("last message of room %s (seq %d): %w", roomID, m.Sequence, err)
	}
	return ev.GetEventId(), true, nil
}

// LatestOfRoom returns the last event of eventType in roomID the stream
// holds, and its sequence; nil and 0 when it holds none. A last message
// that does not decode is an error (the last event before it is not known:
// NextOfRoom finds it).
func (b *Bus) LatestOfRoom(ctx context.Context, roomID, eventType string) (*roomv1.RoomEvent, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	s, err := b.stream(ctx)
	if err != nil {
		return nil, 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, b.Subject(eventType, roomID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("last %s of room %s: %w", eventType, roomID, err)
	}
	ev, err := Decode(m.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("last %s of room %s (seq %d): %w", eventType, roomID, m.Sequence, err)
	}
	return ev, m.Sequence, nil
}

// NextOfRoom returns the first event of eventType in roomID the stream
// holds after stream sequence seq, and its sequence; nil and 0 when it
// holds none. Group control asks it whether a later event of a room
// decides what an earlier one would set. A message on the subject that
// does not decode (another publisher's, a damaged one) is passed over: it
// is no event, and its own delivery is where it is dealt with; failing on
// it would fail every earlier event of the room that looks past it, each
// time it is retried.
func (b *Bus) NextOfRoom(ctx context.Context, roomID, eventType string, seq uint64) (*roomv1.RoomEvent, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	s, err := b.stream(ctx)
	if err != nil {
		return nil, 0, err
	}
	subject := b.Subject(eventType, roomID)
	for {
		m, err := s.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, 0, nil
		case err != nil:
			return nil, 0, fmt.Errorf("next %s of room %s after seq %d: %w", eventType, roomID, seq, err)
		}
		if ev, err := Decode(m.Data); err == nil {
			return ev, m.Sequence, nil
		}
		seq = m.Sequence
	}
}

// stream is the handle of the Bus's stream, looked up once.
func (b *Bus) stream(ctx context.Context) (jetstream.Stream, error) {
	b.streamMu.Lock()
	defer b.streamMu.Unlock()
	if b.streamH != nil {
		return b.streamH, nil
	}
	s, err := b.js.Stream(ctx, b.cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", b.cfg.Stream, err)
	}
	b.streamH = s
	return s, nil
}

// message is r's message on its subject.
func (b *Bus) message(r outbox.Record) (*nats.Msg, error) {
	data, h, err := Encode(r)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: b.Subject(r.EventType, r.RoomID), Data: data, Header: h}, nil
}

// publishErr is the error of r's failed publish: outbox.ErrTransient when
// the broker or the connection failed rather than the message.
func publishErr(r outbox.Record, err error) error {
	if transient(err) {
		return fmt.Errorf("publish event=%s: %w: %w", r.EventID, outbox.ErrTransient, err)
	}
	return fmt.Errorf("publish event=%s: %w", r.EventID, err)
}

// transient reports whether a publish failed because of the broker or the
// connection rather than the message: the relay then backs off as a whole
// and does not count an attempt against the row. A full reconnect buffer
// is the outage's (the copies of retried rows fill it while the broker is
// away), and so is a refusal the broker answers for its own state: a
// server error (5xx: out of storage, no leader, the stream offline) or
// the account's JetStream limits reached. Counted against the rows, either
// would send every room's rows dead one after another while it lasts.
func transient(err error) bool {
	for _, t := range []error{
		context.DeadlineExceeded, context.Canceled, nats.ErrTimeout, nats.ErrNoResponders,
		nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrConnectionDraining,
		nats.ErrDisconnected, nats.ErrNoServers, nats.ErrInvalidConnection, nats.ErrReconnectBufExceeded,
		jetstream.ErrNoStreamResponse, jetstream.ErrAsyncPublishTimeout, jetstream.ErrTooManyStalledMsgs,
		jetstream.ErrJetStreamPublisherClosed,
	} {
		if errors.Is(err, t) {
			return true
		}
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	if api.ErrorCode == errCodeStoreFailed && strings.Contains(api.Description, msgTooLarge) {
		return false // the message's own: it would be refused for ever
	}
	return api.Code >= 500 || api.ErrorCode == errCodeAccountResources
}

const (
	// errCodeAccountResources is JetStream's "resource limits exceeded for
	// account": the account's storage is full, whatever the message.
	errCodeAccountResources jetstream.ErrorCode = 10002
	// errCodeStoreFailed is JetStream's 503 "stream store failed": mostly
	// the stream's state, but with msgTooLarge the message itself is one
	// the file store cannot hold (a record past 32 MiB, which a broker whose
	// max_payload is above that lets through), refused on every attempt.
	errCodeStoreFailed jetstream.ErrorCode = 10077
	msgTooLarge                            = "message too large"
)

// Subject is the subject a record of eventType in roomID is published on:
// <prefix>.<eventType>.<RoomToken(roomID)>. Consumers filter by type with
// "<prefix>.RoomGiftSent.>" or by room with "<prefix>.*.<token>". The event
// type is escaped like a room id, which leaves ordinary type names unchanged.
func (b *Bus) Subject(eventType, roomID string) string {
	return b.cfg.SubjectPrefix + "." + RoomToken(eventType) + "." + RoomToken(roomID)
}

// TypeFilter is the subject filter for every event of eventType:
// "<prefix>.<eventType>.>".
func (b *Bus) TypeFilter(eventType string) string {
	return b.cfg.SubjectPrefix + "." + RoomToken(eventType) + ".>"
}

// RoomFilter is the subject filter for every event of roomID:
// "<prefix>.*.<RoomToken(roomID)>".
func (b *Bus) RoomFilter(roomID string) string {
	return b.cfg.SubjectPrefix + ".*." + RoomToken(roomID)
}

// AllFilter is the subject filter for every event: "<prefix>.>".
func (b *Bus) AllFilter() string { return b.cfg.SubjectPrefix + ".>" }

// Stream is the name of the stream the Bus publishes to.
func (b *Bus) Stream() string { return b.cfg.Stream }

// CreateSideStream creates or updates a small stream beside the outbox's, with its storage and replicas:
// file storage, discard old, at most maxMsgs messages kept for at most maxAge. Consumers keep their own
// records in it, such as the events a consumer gave up on. Its subjects must not overlap the outbox's.
func (b *Bus) CreateSideStream(ctx context.Context, name string, subjects []string, maxAge time.Duration, maxMsgs int64) error {
	_, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: subjects, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		Discard: jetstream.DiscardOld, MaxAge: maxAge, MaxMsgs: maxMsgs, Duplicates: b.cfg.Duplicates,
		Replicas: b.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("create or update stream %s: %w", name, err)
	}
	return nil
}

// Subscribe creates or updates the durable pull consumer cfg describes on
// the room event stream and starts pulling at most batch messages at a
// time. The consumer takes the events of types only (cfg's filters are
// replaced), so the broker neither delivers nor tracks the others. It takes
// every room event when types is empty, and on a server that predates
// consumers with several filters (NATS 2.10), where the caller skips what it
// did not ask for. The caller stops the iterator; closing the Bus stops it
// too.
func (b *Bus) Subscribe(ctx context.Context, cfg jetstream.ConsumerConfig, types []string, batch int) (jetstream.MessagesContext, error) {
	cfg.FilterSubject, cfg.FilterSubjects = b.AllFilter(), nil
	if len(types) > 0 && b.manyFilters() {
		cfg.FilterSubject = ""
		for _, t := range types {
			cfg.FilterSubjects = append(cfg.FilterSubjects, b.TypeFilter(t))
		}
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, b.cfg.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", cfg.Durable, b.cfg.Stream, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return nil, fmt.Errorf("consume %s on %s: %w", cfg.Durable, b.cfg.Stream, err)
	}
	return iter, nil
}

// manyFilters reports whether the server the Bus is connected to takes
// consumers with several filter subjects (NATS 2.10 and later).
func (b *Bus) manyFilters() bool {
	var major, minor int
	if _, err := fmt.Sscanf(b.nc.ConnectedServerVersion(), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 10
}

// RoomEvent decodes a delivered room event. The room id and event type are
// taken from the headers when the body does not decode, so the returned
// event is never nil and names its room even alongside an error.
func (b *Bus) RoomEvent(msg jetstream.Msg) (*roomv1.RoomEvent, error) {
	ev, err := Decode(msg.Data())
	if err != nil {
		h := msg.Headers()
		return &roomv1.RoomEvent{RoomId: h.Get(HeaderRoomID), EventType: h.Get(HeaderEventType)}, err
	}
	return ev, nil
}

// PublishSide stores data in a side stream (see CreateSideStream) on the
// subject "<prefix>.<RoomToken(key)>", or "<prefix>.unknown" for an empty
// key, and waits for the broker's ack. A non-empty msgID makes a repeat
// inside the duplicate window a no-op.
func (b *Bus) PublishSide(ctx context.Context, prefix, key, msgID string, data []byte) error {
	subject := prefix + ".unknown"
	if key != "" {
		subject = prefix + "." + RoomToken(key)
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if _, err := b.js.Publish(ctx, subject, data, opts...); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// ClientURL is the URL consumers connect to: cfg.URL for an external broker,
// the embedded server's client URL when it listens, and "" when the embedded
// server is in-process only (use Conn or JetStream instead).
func (b *Bus) ClientURL() string {
	if b.srv == nil {
		return b.cfg.URL
	}
	if b.cfg.Listen == "" {
		return ""
	}
	return b.srv.ClientURL()
}

// JetStream is the Bus's JetStream handle, for consumers and tests. It stays
// owned by the Bus and dies with Close.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Conn is the Bus's connection, for consumers and tests. It stays owned by
// the Bus: do not close it.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// Close drains the connection (waiting at most a few seconds for
// outstanding acks), then shuts the embedded server down and waits for it.
// Only the first call does the work; every call returns its result.
// Publishing after Close fails.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		if b.nc != nil {
			err := b.nc.Drain()
			if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				b.closeErr = fmt.Errorf("drain nats connection: %w", err)
			}
			// Drain is asynchronous; the ClosedHandler marks its end. It is
			// bounded by drainTimeout, the extra second covers the handler.
			select {
			case <-b.closed:
			case <-time.After(drainTimeout + time.Second):
				b.nc.Close()
				<-b.closed
			}
		}
		if b.gather != nil {
			b.gather.close()
		}
		if b.order != nil {
			b.order.js.CleanupPublisher() // fails what is still in flight
		}
		b.shutdownServer()
		b.log.Info("nats bus closed")
	})
	return b.closeErr
}

func (b *Bus) shutdownServer() {
	if b.srv == nil {
		return
	}
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}

// startServer runs the embedded server and waits until it takes clients.
func startServer(ctx context.Context, cfg Config, log *slog.Logger) (*server.Server, error) {
	name := cfg.Name
	if name == "" {
		name = "room-service"
	}
	opts := &server.Options{
		ServerName: name,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true, // the daemon owns signals
		DontListen: cfg.Listen == "",
		// Every client, in-process or not, presents it.
		Authorization: cfg.Token,
	}
	switch {
	case cfg.SyncInterval > 0:
		opts.SyncInterval = cfg.SyncInterval
	case cfg.SyncInterval < 0:
		opts.SyncAlways = true
	}
	if cfg.Listen != "" {
		host, port, err := splitListen(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats listen %q: %w", cfg.Listen, err)
		}
		opts.Host, opts.Port = host, port
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	sl := &serverLog{log: log.With("source", "nats-server")}
	srv.SetLoggerV2(sl, false, false, false)
	srv.Start()
	if err := sl.fatalErr(); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats start: %w", err)
	}
	wait := startTimeout
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		if err := sl.fatalErr(); err != nil {
			return nil, fmt.Errorf("embedded nats start: %w", err)
		}
		return nil, fmt.Errorf("embedded nats start: not ready after %s", wait)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, errors.New("embedded nats start: jetstream is not enabled")
	}
	return srv, nil
}

// splitListen parses "host:port"; port 0 asks the server for a free port.
func splitListen(listen string) (string, int, error) {
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// redactURL drops user info from every URL of a comma-separated list, so
// credentials never reach an error message or a log.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		u = strings.TrimSpace(u)
		if at := strings.LastIndex(u, "@"); at >= 0 {
			scheme := ""
			if k := strings.Index(u, "://"); k >= 0 && k < at {
				scheme = u[:k+3]
			}
			u = scheme + "***@" + u[at+1:]
		}
		parts[i] = u
	}
	return strings.Join(parts, ",")
}

// serverLog routes the embedded server's log into slog. The server's notices
// (its start banner among them) are Debug; a Fatalf is remembered so that
// Open can return it instead of the process exiting.
type serverLog struct {
	log   *slog.Logger
	mu    sync.Mutex
	fatal error
}

func (l *serverLog) fatalErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

func (l *serverLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLog) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	l.mu.Lock()
	if l.fatal == nil {
		l.fatal = errors.New(msg)
	}
	l.mu.Unlock()
}
