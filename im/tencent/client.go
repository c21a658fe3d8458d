// Package tencent is a client for the Tencent Cloud IM (TIM) server REST API: the group calls room-service
// needs to show room events in one AVChatRoom group per room.
//
// Every call is POST {Endpoint}/v4/{service}/{command}?sdkappid=&identifier=&usersig=&random=&contenttype=json
// with a JSON body, signed with an admin UserSig (TLSSigAPIv2) that is cached and renewed when half its
// validity has passed. Each command has its own client-side call budget. Transport errors, 10002 and
// rate-limit answers are retried with exponential backoff and jitter, except for the commands the caller
// paces (Config.Paced), whose every call its own budget grants: those return the first failure, for the
// caller to send again through its budget. The request body is encoded once, so a message's Random is the
// same on every attempt and Tencent discards repeats as duplicates.
package tencent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tencentyun/tls-sig-api-v2-golang/tencentyun"
	"golang.org/x/time/rate"
)

const (
	groupService = "group_open_http_svc"

	// maxResponseBytes bounds what is read of one response; group answers are a few hundred bytes.
	maxResponseBytes = 1 << 20

	backoffBase = 100 * time.Millisecond
	backoffMax  = 2 * time.Second
)

// Client calls the Tencent IM REST API for one application. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string
	hc   *http.Client
	log  *slog.Logger

	// now and backoff are fields so tests can move the signature clock and shorten the waits.
	now     func() time.Time
	backoff func(retry int) time.Duration

	sigMu sync.Mutex // guards sig and sigAt
	sig   string
	sigAt time.Time

	limMu    sync.Mutex // guards limiters
	limiters map[string]*rate.Limiter
}

// New validates cfg, applies defaults to its zero fields and returns a Client with its own keep-alive
// connection pool. A nil log discards. Close the Client to release idle connections.
func New(cfg Config, log *slog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= tencentBackendTimeout {
		// Allowed for local endpoints and tests; against Tencent it abandons calls about to succeed.
		log.Warn("tencent im timeout is not above the backend's own 3s timeout",
			"timeout", cfg.Timeout, "endpoint", cfg.Endpoint)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many rooms send at once; the default of 2 idle connections per host would mean a TLS handshake
	// for most calls. The IM lane has up to 64 calls in flight (32 workers on each of its two lanes),
	// group control 32.
	tr.MaxIdleConnsPerHost = 96
	return &Client{
		cfg:      cfg,
		base:     strings.TrimSuffix(cfg.Endpoint, "/"),
		hc:       &http.Client{Transport: tr, Timeout: cfg.Timeout},
		log:      log,
		now:      time.Now,
		backoff:  exponentialBackoff,
		limiters: make(map[string]*rate.Limiter),
	}, nil
}

// Close releases the idle keep-alive connections. Calls in flight are not interrupted.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// call sends req to service/command and decodes a successful answer into out (if not nil). The body is
// encoded once so that every retry carries exactly the same bytes.
func (c *Client) call(ctx context.Context, service, command string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("tencent im %s: encode request: %w", command, err)
	}
	path := "/v4/" + service + "/" + command
	paced := slices.Contains(c.cfg.Paced, command)
	var lim *rate.Limiter
	if !paced {
		lim = c.limiter(path)
	}
	for retry := 0; ; retry++ {
		again, err := c.attempt(ctx, lim, path, command, body, out)
		if err == nil {
			return nil
		}
		// A paced command's caller took one call of its budget for this
		// attempt; a retry here would be a call it never granted.
		if !again || retry >= c.cfg.Retries || paced {
			return err
		}
		d := c.backoff(retry)
		c.log.LogAttrs(ctx, slog.LevelWarn, "tencent im call retrying",
			slog.String("command", command), slog.Int("retry", retry+1),
			slog.Duration("backoff", d), slog.Any("err", err))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (retry abandoned: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// attempt makes one HTTP request (after waiting for lim, unless nil) and reports whether its failure is worth retrying.
func (c *Client) attempt(ctx context.Context, lim *rate.Limiter, path, command string, body []byte, out any) (again bool, err error) {
	if lim != nil {
		if err := lim.Wait(ctx); err != nil {
			return false, fmt.Errorf("tencent im %s: wait for the call budget: %w: %w", command, ErrRateLimited, err)
		}
	}
	sig, err := c.userSig()
	if err != nil {
		return false, fmt.Errorf("tencent im %s: sign: %w", command, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(path, sig), bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("tencent im %s: build request: %w", command, c.redact(path, err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("tencent im %s: %w: %w", command, ErrTransient, c.redact(path, err))
	}
	defer func() {
		// Drain so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		_ = resp.Body.Close()
	}()
	switch {
	case resp.StatusCode >= 500:
		return ctx.Err() == nil, fmt.Errorf("tencent im %s: http status %d: %w", command, resp.StatusCode, ErrTransient)
	case resp.StatusCode == http.StatusTooManyRequests:
		// Not documented for this API (limits come as codes in an HTTP 200), but a proxy may say it.
		return ctx.Err() == nil, fmt.Errorf("tencent im %s: http status %d: %w", command, resp.StatusCode, ErrRateLimited)
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("tencent im %s: unexpected http status %d", command, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("tencent im %s: read response: %w: %w", command, ErrTransient, c.redact(path, err))
	}
	if len(data) > maxResponseBytes {
		return false, fmt.Errorf("tencent im %s: response over %d bytes", command, maxResponseBytes)
	}
	// Only the three envelope fields decide the outcome; others (RequestId, ErrorDisplay, …) are ignored.
	var env struct {
		ActionStatus string
		ErrorCode    int
		ErrorInfo    string
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return false, fmt.Errorf("tencent im %s: decode response: %w", command, err)
	}
	if env.ActionStatus != "OK" || env.ErrorCode != 0 {
		apiErr := &APIError{Code: env.ErrorCode, Info: env.ErrorInfo, Command: command}
		if errors.Is(apiErr, ErrSignature) {
			c.forgetSig()
		}
		return retryable(apiErr) && ctx.Err() == nil, apiErr
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return false, fmt.Errorf("tencent im %s: decode response: %w", command, err)
		}
	}
	return false, nil
}

// url builds the request URL with a fresh random per HTTP request, as the API requires.
func (c *Client) url(path, sig string) string {
	var b strings.Builder
	b.WriteString(c.base)
	b.WriteString(path)
	b.WriteString("?sdkappid=")
	b.WriteString(strconv.FormatUint(c.cfg.SDKAppID, 10))
	b.WriteString("&identifier=")
	b.WriteString(url.QueryEscape(c.cfg.Admin))
	// The UserSig alphabet (A-Z a-z 0-9 * - _) is query-safe; it goes unescaped, as the official SDKs send it.
	b.WriteString("&usersig=")
	b.WriteString(sig)
	b.WriteString("&random=")
	b.WriteString(strconv.FormatUint(uint64(rand.Uint32()), 10))
	b.WriteString("&contenttype=json")
	return b.String()
}

// redact replaces the URL in a transport error, whose query carries the UserSig, by one without a query.
func (c *Client) redact(path string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: c.base + path, Err: ue.Err}
	}
	return err
}

// userSig returns the cached admin UserSig, signing a new one when half its validity has passed.
func (c *Client) userSig() (string, error) {
	c.sigMu.Lock()
	defer c.sigMu.Unlock()
	now := c.now()
	if c.sig != "" && now.Sub(c.sigAt) < c.cfg.SigTTL/2 {
		return c.sig, nil
	}
	sig, err := tencentyun.GenUserSig(int(c.cfg.SDKAppID), c.cfg.SecretKey, c.cfg.Admin, int(c.cfg.SigTTL/time.Second))
	if err != nil {
		return "", err
	}
	c.sig, c.sigAt = sig, now
	return sig, nil
}

// forgetSig makes the next call sign afresh after Tencent refused the signature.
func (c *Client) forgetSig() {
	c.sigMu.Lock()
	c.sig = ""
	c.sigMu.Unlock()
}

// limiter returns the call budget of one command. Its burst is 1, so calls are spaced evenly and no
// one-second window holds more than CallsPerSecond+1 of them; a larger burst would let a burst plus the
// steady rate exceed Tencent's per-second limit.
func (c *Client) limiter(path string) *rate.Limiter {
	c.limMu.Lock()
	defer c.limMu.Unlock()
	l := c.limiters[path]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(c.cfg.CallsPerSecond), 1)
		c.limiters[path] = l
	}
	return l
}

// exponentialBackoff waits base·2^retry capped at backoffMax, with equal jitter: between half and all of it.
func exponentialBackoff(retry int) time.Duration {
	d := backoffMax
	if retry < 8 {
		d = min(backoffBase<<retry, backoffMax)
	}
	half := d / 2
	return half + rand.N(half+1)
}
