package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Groups of packages the rules name, relative to the module path. "x/..."
// is x and every package below it; "..." is every package of the module.
var (
	// domain is the core that knows no technology.
	domain = []string{"room", "snapshot", "gift"}
	// adapters are the packages that talk to one technology. The lease
	// package keeps its local implementation beside the interface, so it is
	// not listed; the Redis one (lease/redislease) is.
	adapters = []string{"store/sqlite", "store/mysql", "outbox/natsbus", "im/tencent", "im/timlocal", "lease/redislease", "im/redisbudget"}
	// wiring is where concrete adapters are put together: the daemon's Main
	// (which cmd/room-service runs), the commands, the benchmarks.
	wiring = []string{"cmd/...", "internal/daemon", "bench"}
)

// rule is one line of the architecture: no package matching from (less
// except) may depend, directly or through other packages of the module, on
// a package that deny refuses for it.
type rule struct {
	name   string
	from   []string
	except []string
	deny   func(from, dep pkg) bool
}

var rules = []rule{
	{name: "room imports only the standard library", from: []string{"room"}, deny: notStandard},
	{name: "the domain imports no adapter", from: domain, deny: isAdapter},
	{name: "adapters never import each other", from: trees(adapters), deny: otherAdapter},
	{name: "only the wiring packages use concrete adapters (a port may wrap the adapters below it)",
		from: []string{"..."}, except: wiring, deny: adapterOutsideOwnTree},
	{name: "im does not import cell", from: []string{"im/..."}, deny: under("cell/...")},
	// outbox holds the row the seed's Repository speaks (outbox.Record); the
	// relay that delivers the rows is outbox/relay.
	{name: "store does not import the relay", from: []string{"store/..."}, deny: under("outbox/relay/...")},
	// The embedded ledger (wallet/ledger) is built on the SQL layer and
	// installs its settle statement in the room commit: the stores never
	// know it.
	{name: "store does not import the wallet", from: []string{"store/..."}, deny: under("wallet/...")},
}

// trees is every package at or below the given ones.
func trees(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = p + "/..."
	}
	return out
}

// pkg is what go list tells of one package.
type pkg struct {
	ImportPath string
	Standard   bool
	Module     *struct{ Path string }
	Imports    []string

	rel string // path relative to the module ("" outside it)
}

func notStandard(_, dep pkg) bool { return !dep.Standard }

func isAdapter(_, dep pkg) bool { return adapterOf(dep) != "" }

func otherAdapter(from, dep pkg) bool {
	a := adapterOf(dep)
	return a != "" && a != adapterOf(from)
}

func adapterOutsideOwnTree(from, dep pkg) bool {
	a := adapterOf(dep)
	return a != "" && a != adapterOf(from) && !strings.HasPrefix(a, from.rel+"/")
}

func under(patterns ...string) func(_, dep pkg) bool {
	return func(_, dep pkg) bool { return matchAny(patterns, dep.rel) }
}

// adapterOf is the adapter dep belongs to (itself or a package below it), or "".
func adapterOf(p pkg) string {
	for _, a := range adapters {
		if match(a+"/...", p.rel) {
			return a
		}
	}
	return ""
}

func match(pattern, rel string) bool {
	if rel == "" {
		return false
	}
	if pattern == "..." {
		return true
	}
	if root, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == root || strings.HasPrefix(rel, root+"/")
	}
	return rel == pattern
}

func matchAny(patterns []string, rel string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, rel) })
}

// graph is every package the module's packages are built from.
type graph map[string]pkg

// load runs go list over the module.
func load(t *testing.T) graph {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}\n{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", stderrOf(err))
	}
	module, dir, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Module,Imports", "./...")
	cmd.Dir = dir
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", stderrOf(err))
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Module != nil && p.Module.Path == module {
			p.rel = strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		}
		g[p.ImportPath] = p
	}
	return g
}

func stderrOf(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

// violations are the dependencies of p that r denies, each as the shortest
// import chain from p, such as "im -> cell".
func (g graph) violations(r rule, p pkg) []string {
	var found []string
	prev := map[string]string{p.ImportPath: ""}
	queue := []string{p.ImportPath}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, imp := range g[cur].Imports {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = cur
			dep := g[imp]
			if r.deny(p, dep) {
				found = append(found, g.chain(prev, imp))
			}
			if dep.rel != "" { // only the module's own packages lead on to the module's packages
				queue = append(queue, imp)
			}
		}
	}
	return found
}

func (g graph) chain(prev map[string]string, to string) string {
	var path []string
	for p := to; p != ""; p = prev[p] {
		name := g[p].rel
		if name == "" {
			name = p
		}
		path = append(path, name)
	}
	slices.Reverse(path)
	return strings.Join(path, " -> ")
}

// TestImportRules checks every rule against the module's packages (their
// non-test imports: tests may wire anything).
func TestImportRules(t *testing.T) {
	g := load(t)
	var own []pkg
	for _, p := range g {
		if p.rel != "" {
			own = append(own, p)
		}
	}
	slices.SortFunc(own, func(a, b pkg) int { return strings.Compare(a.rel, b.rel) })
	for _, group := range [][]string{domain, adapters, wiring} {
		for _, pattern := range group {
			if !slices.ContainsFunc(own, func(p pkg) bool { return match(pattern, p.rel) }) {
				t.Errorf("the rule table names %q, which matches no package: update the table", pattern)
			}
		}
	}
	for _, r := range rules {
		var broken []string
		for _, p := range own {
			if matchAny(r.from, p.rel) && !matchAny(r.except, p.rel) {
				broken = append(broken, g.violations(r, p)...)
			}
		}
		if len(broken) > 0 {
			t.Errorf("%s; broken by:\n\t%s", r.name, strings.Join(broken, "\n\t"))
		}
	}
}
