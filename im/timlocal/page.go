package timlocal

import (
	"encoding/json"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// pageMessages is how many recent messages per group the HTML page shows, newest first.
const pageMessages = 50

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"pathEscape": url.PathEscape,
	"clock":      func(t time.Time) string { return t.Format("15:04:05.000") },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>Local Tencent IM</title>
<style>
body{font-family:sans-serif;margin:1em}
table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top;font-size:13px;text-align:left}
tr.dropped td{color:#999;text-decoration:line-through}
tr.dropped td.reason{text-decoration:none;color:#b00}
pre{margin:0;white-space:pre-wrap;word-break:break-all;max-width:70em}
</style></head><body>
<h1>Local Tencent IM endpoint</h1>
<p>SDKAppID {{.SDKAppID}}, admin <code>{{.Admin}}</code>; group rate {{.GroupRate}}/s.
Faults: <code>{{.Faults}}</code>.
{{if .State}}Groups are kept in <code>{{.State}}</code>{{if .StateErr}} (last save failed: {{.StateErr}}){{end}}; messages start afresh after a restart.{{end}}
JSON: <a href="stats">stats</a>, <a href="faults">faults</a> (POST JSON to change).</p>
{{range .Groups}}
<h2>{{.ID}} <small>{{.Type}} “{{.Name}}”{{if .ShutUpAll}}, all members muted{{end}}</small></h2>
<p>delivered {{.Stats.Delivered}}, dropped {{.Stats.Dropped}}, duplicates {{.Stats.Duplicates}},
most in one second: {{.Stats.MaxPerSecond}} delivered, {{.Stats.MaxOfferedPerSecond}} offered;
muted {{.Muted}}, banned {{.Banned}}.
<a href="groups/{{pathEscape .ID}}/messages">all recent messages (JSON)</a></p>
<table><tr><th>seq</th><th>time</th><th>priority</th><th>from</th><th>desc</th><th>data / text</th><th></th></tr>
{{range .Messages}}<tr{{if .Dropped}} class="dropped"{{end}}>
<td>{{.MsgSeq}}</td><td>{{clock .Time}}</td><td>{{.Priority}}</td><td>{{.From}}</td><td>{{.Desc}}</td>
<td>{{range .Elements}}<pre>{{if .Text}}{{.Text}}{{else}}{{.Data}}{{end}}</pre>{{end}}</td>
<td class="reason">{{if .Dropped}}dropped: {{.DropReason}}{{end}}</td></tr>
{{end}}</table>
{{else}}<p>No groups yet.</p>{{end}}
</body></html>
`))

type pageGroup struct {
	ID, Type, Name string
	ShutUpAll      bool
	Stats          GroupStats
	Muted, Banned  int
	Messages       []Message
}

func (s *Server) servePage(w http.ResponseWriter, _ *http.Request) {
	faults, _ := json.Marshal(s.CurrentFaults())
	data := struct {
		SDKAppID  uint64
		Admin     string
		GroupRate int
		Faults    string
		State     string
		StateErr  error
		Groups    []pageGroup
	}{SDKAppID: s.cfg.SDKAppID, Admin: s.cfg.Admin, GroupRate: s.cfg.GroupRate, Faults: string(faults)}

	s.mu.Lock()
	data.State, data.StateErr = s.statePath, s.saveErr
	now := s.now()
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[id]
		recent := g.history[max(0, len(g.history)-pageMessages):]
		msgs := slices.Clone(recent)
		slices.Reverse(msgs)
		data.Groups = append(data.Groups, pageGroup{
			ID: g.id, Type: g.typ, Name: g.name, ShutUpAll: g.shutUpAll, Stats: g.stats,
			Muted: len(active(g.muted, now)), Banned: len(active(g.banned, now)), Messages: msgs,
		})
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := page.Execute(w, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// serveStats answers {"groups": {id: GroupStats}, "calls": {command: n}, "limits": {command: CallStats},
// "hanging": n, "faults": Faults}.
func (s *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	faults := s.CurrentFaults()
	s.mu.Lock()
	groups := make(map[string]GroupStats, len(s.groups))
	for id, g := range s.groups {
		groups[id] = g.stats
	}
	calls := make(map[string]uint64, len(s.calls))
	for c, n := range s.calls {
		calls[c] = n
	}
	limits := make(map[string]CallStats, len(s.windows))
	for c, cw := range s.windows {
		limits[c] = cw.stats
	}
	hanging := s.hanging
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"groups": groups, "calls": calls, "limits": limits, "hanging": hanging, "faults": faults})
}

// serveMessages answers {"group": id, "last_seq": n, "messages": [...]} with the recent messages whose
// MsgSeq is above the since query parameter (default 0: all that are kept). Polling with since=last_seq
// returns only what is new.
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var since uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "since must be a MsgSeq (unsigned integer)"})
			return
		}
		since = n
	}
	s.mu.Lock()
	g := s.groups[id]
	var msgs []Message
	var last uint64
	if g != nil {
		last = g.seq
		i, _ := slices.BinarySearchFunc(g.history, since+1, func(m Message, seq uint64) int {
			switch {
			case m.MsgSeq < seq:
				return -1
			case m.MsgSeq > seq:
				return 1
			}
			return 0
		})
		msgs = slices.Clone(g.history[i:])
	}
	s.mu.Unlock()
	if g == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "group " + id + " does not exist"})
		return
	}
	if msgs == nil {
		msgs = []Message{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"group": id, "last_seq": last, "messages": msgs})
}

func (s *Server) serveFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.CurrentFaults())
}

// serveSetFaults replaces the faults with the posted JSON, e.g.
// {"latency":"4s","fail_next":2,"fail_after_apply":true,"rate_limit":false,"expire_sigs":false,"hang":false};
// absent keys are off, unknown keys are refused.
func (s *Server) serveSetFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "faults: " + err.Error()})
		return
	}
	s.SetFaults(f)
	writeJSON(w, http.StatusOK, s.CurrentFaults())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
