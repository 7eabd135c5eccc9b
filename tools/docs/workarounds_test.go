// Package docs holds tests that keep the project's documentation honest against its code.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark/ast"
	extast "github.com/yuin/goldmark/extension/ast"
)

// behavioursHeading is the heading of metallb-iad/README.md's table of MetalLB behaviours.
const behavioursHeading = "MetalLB behaviours the driver answers"

var testName = regexp.MustCompile(`^Test[A-Za-z0-9_]+$`)

// Every test metallb-iad/README.md's table of MetalLB behaviours names exists, so the table
// cannot point at a test that was renamed or removed.
func TestWorkaroundTableNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "metallb-iad", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := parsePage(string(readme))
	section := doc.section(3, behavioursHeading)
	if section == nil {
		t.Fatal("metallb-iad/README.md has no table of MetalLB behaviours")
	}
	named := map[string]bool{}
	for _, c := range doc.codeSpans(section...) {
		if testName.MatchString(c) {
			named[c] = false
		}
	}
	if len(named) < 10 {
		t.Fatalf("the table names only %d tests", len(named))
	}
	def := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllStringSubmatch(string(data), -1) {
			if _, ok := named[m[1]]; ok {
				named[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, found := range named {
		if !found {
			t.Errorf("metallb-iad/README.md names %s, which no test file defines", name)
		}
	}
}

// Each live row of the table shows its behaviour with an end-to-end test on MetalLB alone
// (e2e/metallb_behaviour_test.go), and each such test is in the table: a behaviour test that
// is not one, or one the table forgets, fails here. Rows marked gone name none.
func TestWorkaroundTableRowsHaveBehaviourTests(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "metallb-iad", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "e2e", "metallb_behaviour_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^func (TestMetalLB[A-Za-z0-9_]+)\(t \*testing\.T\)`).FindAllStringSubmatch(string(src), -1) {
		defined[m[1]] = false
	}
	if len(defined) == 0 {
		t.Fatal("e2e/metallb_behaviour_test.go defines no TestMetalLB… test")
	}
	doc := parsePage(string(readme))
	var table *extast.Table
	for _, n := range doc.section(3, behavioursHeading) {
		if tb, ok := n.(*extast.Table); ok && table == nil {
			table = tb
		}
	}
	if table == nil {
		t.Fatal("metallb-iad/README.md has no table of MetalLB behaviours")
	}
	rows := 0
	for r := table.FirstChild(); r != nil; r = r.NextSibling() {
		if _, ok := r.(*extast.TableRow); !ok {
			continue // the header
		}
		var cells []ast.Node
		for c := r.FirstChild(); c != nil; c = c.NextSibling() {
			cells = append(cells, c)
		}
		if len(cells) != 5 {
			t.Errorf("row with %d cells, want 5: %s", len(cells), doc.plainText(r))
			continue
		}
		rows++
		behaviour := doc.plainText(cells[0])
		em, _ := cells[0].FirstChild().(*ast.Emphasis)
		gone := em != nil && strings.HasPrefix(doc.plainText(em), "Gone")
		var tests []string
		for _, c := range doc.codeSpans(cells[3]) {
			if testName.MatchString(c) {
				tests = append(tests, c)
			}
		}
		switch {
		case gone && len(tests) > 0:
			t.Errorf("a gone behaviour names a behaviour test: %s", behaviour)
		case !gone && len(tests) == 0:
			t.Errorf("no behaviour test for: %s", behaviour)
		case !gone && !strings.Contains(doc.plainText(cells[1]), "v0.16"):
			t.Errorf("a live behaviour does not say it is in the MetalLB Cozystack ships (v0.16.1): %s", behaviour)
		}
		for _, name := range tests {
			if _, ok := defined[name]; !ok {
				t.Errorf("behaviour test %s is not a TestMetalLB… test of e2e/metallb_behaviour_test.go (row: %s)", name, behaviour)
			} else {
				defined[name] = true
			}
		}
	}
	if rows < 5 {
		t.Fatalf("read only %d rows", rows)
	}
	for name, used := range defined {
		if !used {
			t.Errorf("e2e/metallb_behaviour_test.go's %s shows no behaviour of the table", name)
		}
	}
}
