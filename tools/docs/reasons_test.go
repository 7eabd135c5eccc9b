package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	mdast "github.com/yuin/goldmark/ast"
)

// The modules whose controllers emit condition reasons and events.
var controllerModules = []string{"address-controller", "metallb-iad"}

// Code that is not shipped: the in-memory driver the core's integration tests run against.
var notShipped = []string{filepath.Join("address-controller", "pkg", "testsupport", "testdriver")}

const troubleshootingPage = "docs/troubleshooting.md"

// Every condition reason and event reason the controllers emit has an entry in
// docs/troubleshooting.md, and every entry names a reason the code still emits.
func TestTroubleshootingCoversEveryEmittedReason(t *testing.T) {
	root := filepath.Join("..", "..")
	emitted, err := emittedReasons(root)
	if err != nil {
		t.Fatal(err)
	}
	// The scanner must see every way a reason is emitted: a Reason constant (KeptByMetalLB), a
	// literal passed to an event recorder (AddressDeleted) or to the Announcer (ClassInUse), a
	// constant of another name in an event literal (Conflict, from ipamv1.ConditionConflict).
	for _, want := range []string{"KeptByMetalLB", "AddressDeleted", "ClassInUse", "Conflict", "WaitingForAddress", "PoolRefused"} {
		if _, ok := emitted[want]; !ok {
			t.Errorf("the scanner did not find reason %s: it no longer sees how the code emits reasons", want)
		}
	}
	if len(emitted) < 50 {
		t.Fatalf("the scanner found only %d reasons", len(emitted))
	}
	page, err := os.ReadFile(filepath.Join(root, troubleshootingPage))
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedReasons(string(page))
	for _, r := range missingReasons(emitted, documented) {
		t.Errorf("%s has no entry for reason %s, which the code emits (%s): add a heading \"### `%s`\" with who sees it, the cause and the remedy",
			troubleshootingPage, r, strings.Join(emitted[r], ", "), r)
	}
	for _, r := range staleEntries(emitted, documented) {
		t.Errorf("%s has an entry for reason %s, which no code emits any more: remove or rename it", troubleshootingPage, r)
	}
}

// The check fails when an entry is missing: the page without its ClaimNotReady entry lacks
// exactly that reason.
func TestTroubleshootingCheckCatchesAMissingEntry(t *testing.T) {
	root := filepath.Join("..", "..")
	emitted, err := emittedReasons(root)
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, troubleshootingPage))
	if err != nil {
		t.Fatal(err)
	}
	if missing := missingReasons(emitted, documentedReasons(string(page))); len(missing) != 0 {
		t.Skipf("the page already lacks %v (TestTroubleshootingCoversEveryEmittedReason says so)", missing)
	}
	cut := regexp.MustCompile("(?m)^### `ClaimNotReady`.*$").ReplaceAllString(string(page), "### (removed)")
	if cut == string(page) {
		t.Fatal("the page has no ### `ClaimNotReady` heading to remove")
	}
	if got := missingReasons(emitted, documentedReasons(cut)); !slices.Equal(got, []string{"ClaimNotReady"}) {
		t.Fatalf("without its entry the check reports %v, want [ClaimNotReady]", got)
	}
	// And a reason the code starts emitting is reported too.
	emitted["SomethingNew"] = []string{"x.go"}
	if got := missingReasons(emitted, documentedReasons(string(page))); !slices.Equal(got, []string{"SomethingNew"}) {
		t.Fatalf("a new reason gives %v, want [SomethingNew]", got)
	}
}

// The scanner finds reasons emitted each way the code does it.
func TestEmittedReasonsScanner(t *testing.T) {
	dir := t.TempDir()
	src := `package x

const (
	ReasonUsed    = "Used"
	ReasonUnused  = "Unused"
	ReasonAlias   = ReasonViaAlias
	ReasonViaAlias = "ViaAlias"
	ConditionThing = "Thing"
	EventTypeWarning = "Warning"
)

type event struct{ reason string }

func f(r recorder, a announcer, typ string) {
	_ = ReasonUsed
	_ = ReasonAlias
	r.Eventf(nil, nil, EventTypeWarning, "Literal", "Action", "msg %s", "x")
	r.Eventf(nil, EventTypeWarning, "OldAPI", "msg")
	a.Say(nil, nil, typ, "Said", "Action", "msg")
	a.SayAbout(nil, "topic", nil, typ, "SaidAbout", "Action", "msg")
	_ = event{reason: ConditionThing}
	c.Reason = "Assigned"
	_ = cond{Reason: "Keyed"}
}
`
	if err := os.MkdirAll(filepath.Join(dir, "address-controller"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "address-controller", "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := emittedReasons(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for r := range got {
		names = append(names, r)
	}
	sort.Strings(names)
	want := []string{"Assigned", "Keyed", "Literal", "OldAPI", "Said", "SaidAbout", "Thing", "Used", "ViaAlias"}
	if !slices.Equal(names, want) {
		t.Fatalf("found %v, want %v", names, want)
	}
}

var reasonName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// emittedReasons scans the non-test Go sources of the controller modules under root and returns
// every reason they emit, with the files that emit it. A reason is emitted when:
//   - a string constant named Reason… is used (not only declared), or
//   - a constant or literal is the reason argument of an event call (the argument after the
//     event type: Eventf, Event, AnnotatedEventf, and the Announcer's Say and SayAbout), or
//   - a constant or literal is the value of a Reason/reason field (a condition, an event).
func emittedReasons(root string) (map[string][]string, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	var names []string
	for _, m := range controllerModules {
		dir := filepath.Join(root, m)
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			continue
		}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() {
				if slices.Contains(notShipped, rel) || d.Name() == "testdata" || d.Name() == "vendor" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files = append(files, f)
			names = append(names, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}

	// Every string constant, by name (values of the same name in several packages are all kept).
	decl := map[string][]ast.Expr{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						decl[n.Name] = append(decl[n.Name], vs.Values[i])
					}
				}
			}
		}
	}
	var resolve func(e ast.Expr, depth int) []string
	resolve = func(e ast.Expr, depth int) []string {
		if depth > 10 {
			return nil
		}
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				if s, err := strconv.Unquote(e.Value); err == nil {
					return []string{s}
				}
			}
		case *ast.Ident:
			var out []string
			for _, v := range decl[e.Name] {
				out = append(out, resolve(v, depth+1)...)
			}
			return out
		case *ast.SelectorExpr:
			return resolve(e.Sel, depth)
		case *ast.ParenExpr:
			return resolve(e.X, depth)
		}
		return nil
	}

	out := map[string][]string{}
	add := func(e ast.Expr, file string) {
		for _, v := range resolve(e, 0) {
			if reasonName.MatchString(v) && !slices.Contains(out[v], file) {
				out[v] = append(out[v], file)
			}
		}
	}
	isEventType := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name == "typ" || e.Name == "eventType" || strings.HasPrefix(e.Name, "EventType")
		case *ast.SelectorExpr:
			return strings.HasPrefix(e.Sel.Name, "EventType")
		}
		return false
	}
	eventCalls := map[string]bool{"Eventf": true, "Event": true, "AnnotatedEventf": true, "Say": true, "SayAbout": true}
	for i, f := range files {
		file := names[i]
		// Declared names are not uses: skip the names of constant specs.
		declared := map[*ast.Ident]bool{}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						declared[n] = true
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				if !declared[n] && strings.HasPrefix(n.Name, "Reason") && len(decl[n.Name]) > 0 {
					add(n, file)
				}
			case *ast.SelectorExpr:
				if strings.HasPrefix(n.Sel.Name, "Reason") && len(decl[n.Sel.Name]) > 0 {
					add(n.Sel, file)
				}
				// Sel is visited as an Ident too; that is the same reason.
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || !eventCalls[sel.Sel.Name] {
					return true
				}
				for j := 0; j+1 < len(n.Args); j++ {
					if isEventType(n.Args[j]) {
						add(n.Args[j+1], file)
						break
					}
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && (k.Name == "Reason" || k.Name == "reason") {
					add(n.Value, file)
				}
			case *ast.AssignStmt:
				for j, l := range n.Lhs {
					if s, ok := l.(*ast.SelectorExpr); ok && (s.Sel.Name == "Reason" || s.Sel.Name == "reason") && j < len(n.Rhs) && len(n.Lhs) == len(n.Rhs) {
						add(n.Rhs[j], file)
					}
				}
			}
			return true
		})
	}
	return out, nil
}

// An entry of the troubleshooting page is a heading of level 2 to 4 that names reasons in code
// spans: "### `ClaimNotReady`", or several, "### `PoolNotSet`, `PoolNotFound`".
var quotedName = regexp.MustCompile("^[A-Z][A-Za-z0-9]*$")

// entries returns the troubleshooting page's entry headings, each with the reasons it names.
func entries(p *page) []entry {
	var out []entry
	for _, h := range p.headings() {
		if h.level < 2 || h.level > 4 {
			continue
		}
		e := entry{heading: h}
		for _, c := range p.codeSpans(h.node) {
			if quotedName.MatchString(c) {
				e.reasons = append(e.reasons, c)
			}
		}
		out = append(out, e)
	}
	return out
}

type entry struct {
	heading
	reasons []string
}

func documentedReasons(md string) map[string]bool {
	out := map[string]bool{}
	for _, e := range entries(parsePage(md)) {
		for _, r := range e.reasons {
			out[r] = true
		}
	}
	return out
}

func missingReasons(emitted map[string][]string, documented map[string]bool) []string {
	var out []string
	for r := range emitted {
		if !documented[r] {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

func staleEntries(emitted map[string][]string, documented map[string]bool) []string {
	var out []string
	for r := range documented {
		if _, ok := emitted[r]; !ok {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

const tenantGuide = "docs/tenant-guide.md"

// Every reason whose troubleshooting entry says a tenant sees it is linked from the tenant
// guide (its "What you may see" table), so a tenant reading the guide meets every reason it can
// be shown.
func TestTenantGuideLinksEveryTenantReason(t *testing.T) {
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, troubleshootingPage))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join(root, tenantGuide))
	if err != nil {
		t.Fatal(err)
	}
	tenant := tenantEntries(string(page))
	// The parser must still read the entries' audience lines.
	for _, want := range []string{"ClaimNotReady", "AddressDeleted", "Detached", "NotServed"} {
		if !slices.Contains(tenant, want) {
			t.Fatalf("%s: no tenant entry %s found (have %v): the audience lines are no longer parsed", troubleshootingPage, want, tenant)
		}
	}
	if slices.Contains(tenant, "HeldByOtherService") {
		t.Fatalf("%s: HeldByOtherService read as a tenant entry", troubleshootingPage)
	}
	t.Logf("%d tenant reasons: %v", len(tenant), tenant)
	for _, r := range unlinkedReasons(tenant, string(guide)) {
		t.Errorf("%s does not link %s#%s, which a tenant can see: add it to \"What you may see\"", tenantGuide, troubleshootingPage, strings.ToLower(r))
	}
}

// The check reports a tenant reason the guide leaves out.
func TestTenantGuideCheckCatchesAMissingReason(t *testing.T) {
	page := "# T\n\n### `Shown`\n\n*Warning event on a Service · tenant.*\n\n**Cause.** x\n\n" +
		"### `Both`\n\n*Normal event on a claim · tenant (on the claim), admin (on the\naddress).* x\n\n" +
		"### `Hidden`\n\n*Condition reason (`Held=False`) · admin; the claim turns `Lost`\n([`AddressLost`](#addresslost)).*\n"
	tenant := tenantEntries(page)
	if !slices.Equal(tenant, []string{"Both", "Shown"}) {
		t.Fatalf("tenant entries %v, want [Both Shown]", tenant)
	}
	guide := "| Service | [`Shown`](troubleshooting.md#shown) | x |\n"
	if got := unlinkedReasons(tenant, guide); !slices.Equal(got, []string{"Both"}) {
		t.Fatalf("unlinked %v, want [Both]", got)
	}
}

var tenantWord = regexp.MustCompile(`\btenant\b`)

// tenantEntries returns the reasons of the troubleshooting entries whose audience line (the
// emphasis that opens an entry: "*Warning event on a Service · tenant.*") names a tenant. An
// entry whose first emphasis is strong ("**Cause.**") has no audience line.
func tenantEntries(md string) []string {
	p := parsePage(md)
	var out []string
	for _, e := range entries(p) {
		var first *mdast.Emphasis
		for n := e.node.NextSibling(); n != nil && first == nil; n = n.NextSibling() {
			if h, ok := n.(*mdast.Heading); ok && h.Level >= 2 && h.Level <= 4 {
				break
			}
			_ = mdast.Walk(n, func(c mdast.Node, entering bool) (mdast.WalkStatus, error) {
				if em, ok := c.(*mdast.Emphasis); ok && entering {
					first = em
					return mdast.WalkStop, nil
				}
				return mdast.WalkContinue, nil
			})
		}
		if first == nil || first.Level != 1 {
			continue
		}
		_, audience, ok := strings.Cut(p.plainText(first), "·")
		if ok && tenantWord.MatchString(audience) {
			out = append(out, e.reasons...)
		}
	}
	sort.Strings(out)
	return out
}

// unlinkedReasons are the reasons the guide has no link to docs/troubleshooting.md#<reason> for.
func unlinkedReasons(reasons []string, guide string) []string {
	linked := map[string]bool{}
	for _, l := range parsePage(guide).links() {
		p, frag, _ := strings.Cut(l.target, "#")
		if path.Base(p) == "troubleshooting.md" {
			linked[strings.ToLower(frag)] = true
		}
	}
	var out []string
	for _, r := range reasons {
		if !linked[strings.ToLower(r)] {
			out = append(out, r)
		}
	}
	return out
}
