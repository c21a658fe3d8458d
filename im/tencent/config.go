package tencent

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"time"
)

// Defaults applied by New to zero-valued Config fields.
const (
	// DefaultTimeout bounds one HTTP attempt. Tencent's own backend gives up after 3 s, so a caller's
	// timeout must be longer than that or it abandons calls that are about to succeed.
	DefaultTimeout = 5 * time.Second
	// DefaultCallsPerSecond is Tencent's default budget for each REST API (200 calls/s per command).
	DefaultCallsPerSecond = 200
	// DefaultSigTTL is the validity requested for the admin UserSig; the Client renews it when half has passed.
	DefaultSigTTL = 24 * time.Hour
	// DefaultRetries is how many times a retryable failure is retried after the first attempt.
	DefaultRetries = 3
)

// tencentBackendTimeout is the REST backend's own timeout (reference section 1.1).
const tencentBackendTimeout = 3 * time.Second

// minSigTTL keeps the renewal point (half the TTL) well above the one-second resolution of TLS.time.
const minSigTTL = time.Minute

// maxAdminLen is the UserID limit documented by the official signer.
const maxAdminLen = 32

// Config holds the credentials and limits of one Tencent IM application.
//
// Zero durations and counts mean the Default* value; negative values are rejected by Validate.
type Config struct {
	// SDKAppID is the application's SDKAppID from the IM console.
	SDKAppID uint64
	// SecretKey is the application's key used to sign UserSigs. It never appears in logs or errors.
	SecretKey string
	// Admin is the App admin account (identifier) every REST call is made as, e.g. "administrator".
	Admin string
	// Endpoint is the data-center base URL, e.g. "https://adminapisgp.im.qcloud.com" (Singapore) or
	// "https://console.tim.qq.com" (China). A path prefix is kept; a trailing slash is ignored.
	Endpoint string
	// Timeout bounds one HTTP attempt (DefaultTimeout).
	Timeout time.Duration
	// CallsPerSecond is the client-side budget per REST command (DefaultCallsPerSecond).
	CallsPerSecond int
	// Paced lists the commands whose calls the caller paces itself, such as send_group_msg, whose budget
	// the IM lane schedules across rooms and nodes: the client keeps no budget for them and makes each call
	// once, returning a transient failure or a rate-limit answer at once instead of retrying, so every call
	// Tencent sees is one the caller's budget granted, and the caller's pacing sees the refusals.
	Paced []string
	// SigTTL is the validity of the admin UserSig (DefaultSigTTL, at least one minute).
	SigTTL time.Duration
	// Retries is how many times a transport error, 10002 or a rate-limit code is retried (DefaultRetries);
	// a Paced command is not retried.
	Retries int
}

// Validate reports every problem with c at once, joined into one error; nil means c is usable.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("tencent im config: "+format, args...))
	}
	if c.SDKAppID == 0 {
		bad("sdkappid is required")
	} else if c.SDKAppID > math.MaxInt {
		// the official signer takes the SDKAppID as an int
		bad("sdkappid %d is out of range", c.SDKAppID)
	}
	if c.SecretKey == "" {
		bad("secret key is required")
	}
	switch {
	case c.Admin == "":
		bad("admin identifier is required")
	case len(c.Admin) > maxAdminLen:
		bad("admin identifier is %d bytes, the limit is %d", len(c.Admin), maxAdminLen)
	}
	if c.Endpoint == "" {
		bad("endpoint is required (for example https://adminapisgp.im.qcloud.com)")
	} else if u, err := url.Parse(c.Endpoint); err != nil {
		bad("endpoint %q does not parse: %v", c.Endpoint, err)
	} else {
		if u.Scheme != "https" && u.Scheme != "http" {
			bad("endpoint %q must be an http or https URL", c.Endpoint)
		}
		if u.Host == "" {
			bad("endpoint %q has no host", c.Endpoint)
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			bad("endpoint %q must not carry a query, fragment or user info", c.Endpoint)
		}
	}
	if c.Timeout < 0 {
		bad("timeout %s is negative", c.Timeout)
	}
	if c.CallsPerSecond < 0 {
		bad("calls per second %d is negative", c.CallsPerSecond)
	}
	if c.SigTTL < 0 || (c.SigTTL > 0 && c.SigTTL < minSigTTL) {
		bad("sig ttl %s must be at least %s", c.SigTTL, minSigTTL)
	}
	if c.Retries < 0 {
		bad("retries %d is negative", c.Retries)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.CallsPerSecond == 0 {
		c.CallsPerSecond = DefaultCallsPerSecond
	}
	if c.SigTTL == 0 {
		c.SigTTL = DefaultSigTTL
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	return c
}

// String describes c without its secret key, so a Config printed with %v leaks nothing.
func (c Config) String() string {
	return fmt.Sprintf("{SDKAppID:%d SecretKey:[redacted] Admin:%s Endpoint:%s Timeout:%s CallsPerSecond:%d SigTTL:%s Retries:%d}",
		c.SDKAppID, c.Admin, c.Endpoint, c.Timeout, c.CallsPerSecond, c.SigTTL, c.Retries)
}

// LogValue describes c for slog without its secret key.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Uint64("sdkappid", c.SDKAppID),
		slog.String("admin", c.Admin),
		slog.String("endpoint", c.Endpoint),
		slog.Duration("timeout", c.Timeout),
		slog.Int("calls_per_second", c.CallsPerSecond),
		slog.Duration("sig_ttl", c.SigTTL),
		slog.Int("retries", c.Retries),
	)
}
