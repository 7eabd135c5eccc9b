package docs

import (
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every Go comment of the repository cites only documents that are in it: no section sign of a
// contract kept elsewhere, no page that lives outside the checkout, and every
// Markdown page it names (a path such as docs/design.md, or a bare name such as README.md,
// resolved from the file's folder up to the repository's root) exists, with the heading its
// #fragment names. The design's rules are cited as docs/design.md#<heading>.
func TestGoCommentsCiteOnlyThisRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := projectFiles(root, ".go")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found only %d Go files", len(files))
	}
	designCitations := 0
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		problems, n := checkGoComments(root, f, src)
		designCitations += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	// The code cites the design in about fifty places; far fewer means the citation parser no
	// longer finds them.
	if designCitations < 30 {
		t.Fatalf("only %d citations of docs/design.md found in Go comments", designCitations)
	}
}

// The checker catches each kind of bad citation and lets a good one through.
func TestGoCommentCheckerCatchesBadCitations(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, tc := range []struct {
		comment string
		bad     bool
	}{
		{"// decide from a fresh view (docs/design.md#a-view-that-includes-your-own-writes).", false},
		{"// see docs/design.md#parking and README.md.", false},
		{"// the whole design: docs/design.md.", false},
		{"// decide from a fresh view (DESIGN §5a).", true},
		{"// as §5a of the contract says", true},
		{"// the rule of DESIGN.md", true},
		{"// PARKING.md written as plain Go", true},
		{"// see /work/shared/facts.md", true},
		{"// see docs/design.md#no-such-heading", true},
		{"// see docs/no-such-page.md", true},
		{"/* see docs/design.md#no-such-heading */", true},
	} {
		src := "package x\n\n" + tc.comment + "\nvar x int // trailing\n"
		problems, _ := checkGoComments(root, "tools/docs/x.go", []byte(src))
		if got := len(problems) > 0; got != tc.bad {
			t.Errorf("%q: problems %q, want bad=%v", tc.comment, problems, tc.bad)
		}
	}
	// Only comments count: a string that mentions a page is data.
	problems, n := checkGoComments(root, "tools/docs/x.go", []byte("package x\n\nvar s = \"DESIGN §5a PARKING.md\"\n"))
	if len(problems) != 0 || n != 0 {
		t.Errorf("a string literal was read as a comment: %q, %d", problems, n)
	}
}

var (
	// outsideCitation: the signs of a document that is not in the repository.
	outsideCitation = regexp.MustCompile(`§|\bDESIGN\.md\b|\bDESIGN\b|\bPARKING\.md\b|/work/shared|reserved-ip-addresses\.txt|\bfacts\.md\b|\bSTYLE\.md\b`)
	// pageCitation: a Markdown page named in a comment, with its fragment if any.
	pageCitation = regexp.MustCompile(`(?:^|[\s("'\x60])((?:\.{0,2}/)?[A-Za-z0-9_][A-Za-z0-9_./-]*\.md)(#[A-Za-z0-9_-]+)?`)
)

// checkGoComments checks the comments of one Go file (slash path relative to root); it returns a
// problem per bad citation and how many citations of docs/design.md it found.
func checkGoComments(root, file string, src []byte) ([]string, int) {
	fset := token.NewFileSet()
	tf := fset.AddFile(file, -1, len(src))
	var s scanner.Scanner
	s.Init(tf, src, nil, scanner.ScanComments)
	var problems []string
	design := 0
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.COMMENT {
			continue
		}
		line := fset.Position(pos).Line
		// A citation may be wrapped onto the next comment line: join the lines first.
		text := strings.Join(strings.Fields(strings.NewReplacer("//", " ", "/*", " ", "*/", " ").Replace(lit)), " ")
		if m := outsideCitation.FindString(text); m != "" {
			problems = append(problems, fmt.Sprintf("%s:%d: a comment cites a document outside the repository (%q); cite docs/design.md#<heading> instead: %s", file, line, m, lit))
		}
		for _, m := range pageCitation.FindAllStringSubmatch(text, -1) {
			page, frag := m[1], strings.TrimPrefix(m[2], "#")
			dest, ok := resolvePage(root, file, page)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s:%d: a comment names %s, which is not in the repository", file, line, page))
				continue
			}
			if dest == "docs/design.md" {
				design++
			}
			if frag == "" {
				continue
			}
			md, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(dest)))
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %v", file, line, err))
				continue
			}
			if !slices.Contains(anchors(string(md)), strings.ToLower(frag)) {
				problems = append(problems, fmt.Sprintf("%s:%d: a comment cites %s#%s, but %s has no such heading", file, line, page, frag, dest))
			}
		}
	}
	return problems, design
}

// resolvePage finds the page a comment names: relative to the file's folder or any folder above
// it, up to the repository's root.
func resolvePage(root, file, page string) (string, bool) {
	for dir := path.Dir(file); ; dir = path.Dir(dir) {
		dest := path.Clean(path.Join(dir, page))
		if !strings.HasPrefix(dest, "../") {
			if info, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err == nil && !info.IsDir() {
				return dest, true
			}
		}
		if dir == "." || dir == "/" {
			return "", false
		}
	}
}
