package rpc

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A call's service is found by its path's first segment only where the
// ServeMux would route the path as it is; other paths go to the ServeMux.
func TestServicePrefix(t *testing.T) {
	for _, c := range []struct {
		method, path, want string
	}{
		{http.MethodPost, "/room.v1.RoomService/JoinRoom", "/room.v1.RoomService/"},
		{http.MethodPost, "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/"},
		{http.MethodGet, "/room.v1.RoomService/", ""}, // the ServeMux cleans the trailing slash away first
		{http.MethodPost, "/room.v1.RoomService/../readyz", ""},
		{http.MethodPost, "//room.v1.RoomService/JoinRoom", ""},
		{http.MethodPost, "/room.v1.RoomService/./JoinRoom", ""},
		{http.MethodGet, "/readyz", ""},
		{http.MethodGet, "/", ""},
		{http.MethodConnect, "/room.v1.RoomService/JoinRoom", ""},
	} {
		r := httptest.NewRequest(c.method, "http://example.test/", nil)
		r.URL.Path = c.path
		if got := servicePrefix(r); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

// The map serves the services' calls; the ServeMux serves the rest, and
// cleans a path before it routes it, as it did alone.
func TestMuxServesServicesAndTheRest(t *testing.T) {
	served := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(name)) })
	}
	m := &Mux{ServeMux: http.NewServeMux(), services: make(map[string]http.Handler)}
	m.service("/a.v1.S/", served("service"))
	m.Handle("/other", served("other"))
	for _, c := range []struct {
		path     string
		code     int
		body     string
		location string
	}{
		{"/a.v1.S/Call", http.StatusOK, "service", ""},
		{"/other", http.StatusOK, "other", ""},
		{"/a.v1.S/../other", http.StatusTemporaryRedirect, "", "/other"}, // the ServeMux's redirect to the clean path
		{"/nothing", http.StatusNotFound, "", ""},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "http://example.test/", nil)
		r.URL.Path = c.path
		m.ServeHTTP(w, r)
		if w.Code != c.code || (c.body != "" && w.Body.String() != c.body) || w.Header().Get("Location") != c.location {
			t.Errorf("%s: %d %q location %q, want %d %q location %q", c.path, w.Code, w.Body.String(), w.Header().Get("Location"), c.code, c.body, c.location)
		}
	}
}
