package docs

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every relative link in every Markdown file of the repository points at a file or directory
// that exists, and a #fragment at a heading (or an HTML anchor) of the page it names, with
// GitHub's rules for heading anchors.
func TestMarkdownLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d Markdown files", len(files))
	}
	links := 0
	for _, f := range files {
		problems, n, err := checkLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		links += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	if links < 100 {
		t.Fatalf("only %d relative links checked: the link parser no longer finds them", links)
	}
}

// Every page under docs/ and every component README is linked from the README's Documentation
// section, so a new page cannot be left out of the index. A page in a subfolder of docs/ (the
// dated notes of docs/notes/) may be covered by a link to its folder instead.
func TestEveryPageIsInTheREADMEIndex(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := parsePage(string(readme))
	section := doc.section(2, "Documentation")
	if section == nil {
		t.Fatal("README.md has no ## Documentation section")
	}
	indexed := map[string]bool{}
	for _, l := range doc.linksUnder(section) {
		p, _, _ := strings.Cut(l, "#")
		indexed[path.Clean(p)] = true
	}
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	for _, f := range files {
		if strings.HasPrefix(f, "docs/") || (path.Base(f) == "README.md" && f != "README.md") {
			pages = append(pages, f)
		}
	}
	if len(pages) < 10 {
		t.Fatalf("found only %d pages to index", len(pages))
	}
	for _, p := range pages {
		if !inIndex(indexed, p) {
			t.Errorf("README.md's Documentation section does not link %s (or, under a subfolder of docs/, its folder)", p)
		}
	}
}

// inIndex: page is linked, or it lies in a subfolder of docs/ and a folder holding it (below
// docs/ itself) is linked.
func inIndex(indexed map[string]bool, page string) bool {
	if indexed[page] {
		return true
	}
	if !strings.HasPrefix(page, "docs/") {
		return false
	}
	for dir := path.Dir(page); dir != "docs" && dir != "."; dir = path.Dir(dir) {
		if indexed[dir] {
			return true
		}
	}
	return false
}

func TestIndexCoversSubfolderPagesByTheirFolder(t *testing.T) {
	indexed := map[string]bool{"docs/a.md": true, "docs/notes": true, "x/README.md": true}
	for page, want := range map[string]bool{
		"docs/a.md":           true,
		"docs/b.md":           false, // a page directly in docs/ needs its own link
		"docs/notes/n.md":     true,
		"docs/notes/old/n.md": true,
		"docs/other/n.md":     false,
		"x/README.md":         true,
		"y/README.md":         false,
	} {
		if got := inIndex(indexed, page); got != want {
			t.Errorf("inIndex(%s) = %v, want %v", page, got, want)
		}
	}
}

// The checker catches a missing file, a missing anchor and a missing page in the index, and
// follows GitHub's anchor rules.
func TestLinkCheckerCatchesBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# A\n\n## Use it on a Service\n\n### `PoolNotSet`, `PoolNotFound`\n\n## Parking (admission)\n\n## Dup\n\n## Dup\n")
	write("README.md", strings.Join([]string{
		"[ok](docs/a.md) [ok](docs/a.md#use-it-on-a-service) [ok](docs/a.md#poolnotset-poolnotfound)",
		"[ok](docs/a.md#parking-admission) [ok](docs/a.md#dup-1) [ok](docs/) [ok](https://example.com/x)",
		"[ok](#top) <a name=\"top\"></a> `[not a link](nowhere.md)`",
		"[bad](docs/b.md) [bad](docs/a.md#use-it) [bad](#nowhere) [bad][ref]",
		"",
		"```",
		"[not a link](nowhere.md)",
		"```",
		"",
		"[ref]: docs/c.md",
	}, "\n"))
	problems, n, err := checkLinks(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n != 11 {
		t.Errorf("checked %d links, want 11", n)
	}
	var got []string
	for _, p := range problems {
		_, target, _ := strings.Cut(p, " links ")
		target, _, _ = strings.Cut(target, ": ")
		got = append(got, target)
	}
	slices.Sort(got)
	want := []string{"#nowhere", "docs/a.md#use-it", "docs/b.md", "docs/c.md"}
	if !slices.Equal(got, want) {
		t.Errorf("broken links found %v, want %v (%v)", got, want, problems)
	}
}

// Heading anchors as GitHub computes them: from the heading's rendered text (markup, images and
// HTML tags gone, escapes and entities resolved), lower-cased, punctuation other than '-' and
// '_' dropped, spaces made hyphens; a repeated anchor gets -1, -2, ... and never one an earlier
// heading has.
func TestGitHubHeadingAnchors(t *testing.T) {
	for in, want := range map[string]string{
		"Use it on a Service":                                "use-it-on-a-service",
		"`PoolNotSet`, `PoolNotFound`":                       "poolnotset-poolnotfound",
		"Parking (admission)":                                "parking-admission",
		"local.sdn.cozystack.io/v1alpha1":                    "localsdncozystackiov1alpha1",
		"A [linked](x.md) *word* and snake_case":             "a-linked-word-and-snake_case",
		"2026-12-01: benchmarks — MetalLB v0.15.2":           "2026-12-01-benchmarks--metallb-v0152",
		"Chaos on MetalLB v0.16.1 (seed 941606543)":          "chaos-on-metallb-v0161-seed-941606543",
		"Rock &amp; roll, `a &amp; b`":                       "rock--roll-a-amp-b",
		`Escaped \*stars\* and \_under\_`:                    "escaped-stars-and-_under_",
		"An ![icon](i.png) image and <code>html</code> tags": "an--image-and-html-tags",
		"__Bold__ and _em_ words":                            "bold-and-em-words",
		"Émigré naïve café ✓":                                "émigré-naïve-café-",
		"See <https://example.com/x> now":                    "see-httpsexamplecomx-now",
		"Ends with hashes ##":                                "ends-with-hashes",
	} {
		hs := parsePage("# " + in + "\n").headings()
		if len(hs) != 1 || hs[0].anchor != want {
			t.Errorf("anchor of %q = %+v, want %q", in, hs, want)
		}
	}
	md := "# A\n\n## A\n\nSetext\n======\n\n## A-1\n\n## A\n"
	var got []string
	for _, h := range parsePage(md).headings() {
		got = append(got, h.anchor)
	}
	if want := []string{"a", "a-1", "setext", "a-1-1", "a-2"}; !slices.Equal(got, want) {
		t.Errorf("anchors %v, want %v", got, want)
	}
	// Headings inside code are not headings, and HTML anchors count.
	if got := anchors("```\n# not a heading\n```\n\n<a name=\"Here\"></a>\n\n    # indented code\n"); !slices.Equal(got, []string{"here"}) {
		t.Errorf("anchors %v, want [here]", got)
	}
}

var urlScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// checkLinks checks the relative links of one Markdown file (slash path relative to root). It
// returns a problem per broken link and how many distinct relative links it checked.
func checkLinks(root, file string) ([]string, int, error) {
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, 0, err
	}
	var problems []string
	checked := map[string]bool{}
	for _, l := range parsePage(string(data)).links() {
		target := l.target
		if target == "" || strings.HasPrefix(target, "//") || urlScheme.MatchString(target) || checked[target] {
			continue // absolute URLs are not checked, and a target once
		}
		checked[target] = true
		where := fmt.Sprintf("%s:%d", file, l.line)
		p, frag, _ := strings.Cut(target, "#")
		if u, err := url.PathUnescape(p); err == nil {
			p = u
		}
		var dest string
		switch {
		case p == "":
			dest = file
		case strings.HasPrefix(p, "/"):
			dest = path.Clean(strings.TrimPrefix(p, "/"))
		default:
			dest = path.Clean(path.Join(path.Dir(file), p))
		}
		if dest == ".." || strings.HasPrefix(dest, "../") {
			problems = append(problems, fmt.Sprintf("%s links %s: outside the repository", where, target))
			continue
		}
		info, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s links %s: %s does not exist", where, target, dest))
			continue
		}
		if frag == "" {
			continue
		}
		if info.IsDir() || !strings.HasSuffix(dest, ".md") {
			problems = append(problems, fmt.Sprintf("%s links %s: an anchor into %s, which is not a Markdown page", where, target, dest))
			continue
		}
		page, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(dest)))
		if err != nil {
			return nil, 0, err
		}
		if !slices.Contains(anchors(string(page)), strings.ToLower(frag)) {
			problems = append(problems, fmt.Sprintf("%s links %s: %s has no heading or anchor %q", where, target, dest, frag))
		}
	}
	return problems, len(checked), nil
}
