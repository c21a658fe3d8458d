package rpc

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
)

// DevOnly guards a development endpoint (the local Tencent IM endpoint and
// its /local/ pages), which the daemon serves only on a loopback API
// without credentials. A request that may change something (any method
// but GET and HEAD) must be application/json, so a browser cannot send it
// cross-site without a preflight, and must not come from another origin
// (Origin, Sec-Fetch-Site): 415 and 403 otherwise, with a JSON body that
// names a stable reason (unsupported_media_type, cross_origin), as the
// API's ErrorInfo does.
func DevOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			refuseDev(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "only application/json is accepted")
			return
		}
		if !sameOrigin(r) {
			refuseDev(w, http.StatusForbidden, "cross_origin", "requests from another origin are refused")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// refuseDev answers a refused development request.
func refuseDev(w http.ResponseWriter, status int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"reason": reason, "message": message})
}

// sameOrigin reports whether r comes from no browser page or from a page
// of the endpoint's own origin.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
}
