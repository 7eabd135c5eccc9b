// Package docs holds tests that keep the project's documentation honest against its code.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test metallb-iad/README.md's table of MetalLB behaviours names exists, so the table
// cannot point at a test that was renamed or removed.
func TestWorkaroundTableNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "metallb-iad", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(readme), "### MetalLB behaviours the driver answers")
	if start < 0 {
		t.Fatal("metallb-iad/README.md has no table of MetalLB behaviours")
	}
	section := string(readme[start:])
	if end := strings.Index(section[4:], "\n### "); end >= 0 {
		section = section[:end+4]
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(section, -1) {
		named[m[1]] = false
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
