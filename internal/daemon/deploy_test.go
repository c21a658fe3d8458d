package daemon

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// The dashboard and the alert rules under deploy/ name metrics by their
// exported names; a renamed or removed metric would leave a panel empty or
// an alert that never fires. This test reads every PromQL expression of
// both and checks that each metric it names is one the service registers.

var (
	// quoted strings (label values, regexps) say nothing of metric names.
	promString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	// label matchers {…}, ranges and subqueries […], and the label lists
	// of by/without/on/ignoring/group_left/group_right (…).
	promMatchers   = regexp.MustCompile(`\{[^{}]*\}|\[[^\[\]]*\]`)
	promLabelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// an identifier; one followed by "(" is a function or an aggregation.
	promIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promWords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
	// a duration's unit after a number (offset 5m) is no identifier.
	promNumber = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y|e[+-]?\d+)?\b`)
)

// promMetrics returns the metric names a PromQL expression selects.
func promMetrics(expr string) []string {
	expr = promString.ReplaceAllString(expr, `""`)
	for prev := ""; prev != expr; {
		prev, expr = expr, promMatchers.ReplaceAllString(expr, " ")
	}
	expr = promLabelLists.ReplaceAllString(expr, " ")
	expr = promNumber.ReplaceAllString(expr, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatch(expr, -1) {
		if m[1] != "" || slices.Contains(promWords, strings.ToLower(m[0])) {
			continue
		}
		out = append(out, m[0])
	}
	return out
}

func TestPromMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (procedure, le) (rate(room_rpc_duration_seconds_bucket[$__rate_interval])))`: {"room_rpc_duration_seconds_bucket"},
		`sum(rate(room_im_sent_total[5m])) / max(room_im_app_budget_calls_per_second) > 0.9`:                          {"room_im_sent_total", "room_im_app_budget_calls_per_second"},
		`sum(increase(room_im_shed_total{priority="High", reason=~"a|b(c)"}[5m])) > 0`:                                {"room_im_shed_total"},
		`room_ready == 0 and on (instance) up offset 1h`:                                                              {"room_ready", "up"},
		`rate(process_cpu_seconds_total[1m:10s])`:                                                                     {"process_cpu_seconds_total"},
	} {
		if got := promMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", expr, got, want)
		}
	}
}

// exported are the metric names a running service registers, with the
// series names of its histograms (_bucket, _sum, _count) and summaries.
func exported(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	descs := make(chan *prometheus.Desc)
	go func() { reg.Describe(descs); close(descs) }()
	names := map[string]bool{}
	for d := range descs {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			names[m[1]+s] = true
		}
	}
	return names
}

func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	m, _ := runMain(t, t.TempDir())
	names := exported(t, m.metrics.registry)
	for _, want := range []string{"room_rpc_requests_total", "room_ready", "room_outbox_dead_rows", "room_mailbox_full_total"} {
		if !names[want] {
			t.Fatalf("the registry lacks %s: the walk over it is broken", want)
		}
	}
	check := func(where, expr string) {
		t.Helper()
		metrics := promMetrics(expr)
		if len(metrics) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, name := range metrics {
			if !names[name] {
				t.Errorf("%s: %s is not a metric the service exports (in %q)", where, name, expr)
			}
		}
	}

	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	data, err := os.ReadFile("../../deploy/grafana/room-service.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	panels := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Expr        string
				Annotations map[string]string
			}
		}
	}
	data, err = os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			check("alert "+r.Alert, r.Expr)
			if !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") {
				t.Errorf("alert %s has no section in docs/runbook.md", r.Alert)
			}
			if want := "docs/runbook.md#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
				t.Errorf("alert %s: runbook annotation %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
		}
	}
	if panels == 0 || alerts == 0 {
		t.Fatalf("%d panels, %d alerts", panels, alerts)
	}
}
