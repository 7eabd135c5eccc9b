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
	"unicode"
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
	section := markdownSection(string(readme), "Documentation")
	if section == "" {
		t.Fatal("README.md has no ## Documentation section")
	}
	indexed := map[string]bool{}
	for _, l := range extractLinks(section) {
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
		got = append(got, p[strings.Index(p, "links ")+6:strings.Index(p, ":")])
	}
	slices.Sort(got)
	want := []string{"#nowhere", "docs/a.md#use-it", "docs/b.md", "docs/c.md"}
	if !slices.Equal(got, want) {
		t.Errorf("broken links found %v, want %v (%v)", got, want, problems)
	}
}

func TestGitHubSlugs(t *testing.T) {
	for in, want := range map[string]string{
		"Use it on a Service":                       "use-it-on-a-service",
		"`PoolNotSet`, `PoolNotFound`":              "poolnotset-poolnotfound",
		"Parking (admission)":                       "parking-admission",
		"local.sdn.cozystack.io/v1alpha1":           "localsdncozystackiov1alpha1",
		"A [linked](x.md) *word* and snake_case":    "a-linked-word-and-snake_case",
		"2026-12-01: benchmarks — MetalLB v0.15.2":  "2026-12-01-benchmarks--metallb-v0152",
		"Chaos on MetalLB v0.16.1 (seed 941606543)": "chaos-on-metallb-v0161-seed-941606543",
	} {
		if got := githubSlug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

var (
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]*(?:\([^()\s]*\)[^()\s>]*)*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	htmlLink   = regexp.MustCompile(`<(?:a|img)\s[^>]*?(?:href|src)="([^"]*)"`)
	htmlAnchor = regexp.MustCompile(`<a\s[^>]*?(?:name|id)="([^"]*)"`)
	urlScheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// extractLinks returns the targets of a Markdown text's links (inline, reference definitions and
// HTML), leaving out code blocks and code spans.
func extractLinks(md string) []string {
	text := stripCodeSpans(stripFences(md))
	var out []string
	for _, re := range []*regexp.Regexp{inlineLink, refDef, htmlLink} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// stripCodeSpans drops inline code: a run of backquotes up to the next run of the same length.
func stripCodeSpans(md string) string {
	var b strings.Builder
	for i := 0; i < len(md); {
		if md[i] != '`' {
			b.WriteByte(md[i])
			i++
			continue
		}
		n := 0
		for i+n < len(md) && md[i+n] == '`' {
			n++
		}
		fence := strings.Repeat("`", n)
		end := -1
		for j := i + n; j < len(md); {
			k := strings.Index(md[j:], fence)
			if k < 0 {
				break
			}
			k += j
			if (k+n >= len(md) || md[k+n] != '`') && (k == 0 || md[k-1] != '`') {
				end = k
				break
			}
			j = k + 1
			for j < len(md) && md[j] == '`' {
				j++
			}
		}
		if end < 0 {
			b.WriteString(fence) // no closing run: literal backquotes
			i += n
			continue
		}
		i = end + n
	}
	return b.String()
}

// checkLinks checks the relative links of one Markdown file (slash path relative to root). It
// returns a problem per broken link and how many relative links it checked.
func checkLinks(root, file string) ([]string, int, error) {
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, 0, err
	}
	var problems []string
	n := 0
	for _, target := range extractLinks(string(data)) {
		if target == "" || strings.HasPrefix(target, "//") || urlScheme.MatchString(target) {
			continue // absolute URLs are not checked
		}
		n++
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
			problems = append(problems, fmt.Sprintf("%s links %s: outside the repository", file, target))
			continue
		}
		info, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s links %s: %s does not exist", file, target, dest))
			continue
		}
		if frag == "" {
			continue
		}
		if info.IsDir() || !strings.HasSuffix(dest, ".md") {
			problems = append(problems, fmt.Sprintf("%s links %s: an anchor into %s, which is not a Markdown page", file, target, dest))
			continue
		}
		page, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(dest)))
		if err != nil {
			return nil, 0, err
		}
		if !slices.Contains(anchors(string(page)), strings.ToLower(frag)) {
			problems = append(problems, fmt.Sprintf("%s links %s: %s has no heading or anchor %q", file, target, dest, frag))
		}
	}
	return problems, n, nil
}

// anchors lists the fragments a page answers to on GitHub: one per heading (a repeated heading
// gets -1, -2, …), and the names and ids of its HTML anchors.
func anchors(md string) []string {
	var out []string
	seen := map[string]int{}
	for _, line := range strings.Split(stripFences(md), "\n") {
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(m[2])
		if k := seen[slug]; k > 0 {
			out = append(out, fmt.Sprintf("%s-%d", slug, k))
		} else {
			out = append(out, slug)
		}
		seen[slug]++
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(md, -1) {
		out = append(out, strings.ToLower(m[1]))
	}
	return out
}

var (
	slugLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	slugHTML = regexp.MustCompile(`<[^>]+>`)
)

// githubSlug is the anchor GitHub gives a heading: its text without Markdown, lower-cased, every
// character but letters, digits, spaces, hyphens and underscores dropped, spaces made hyphens.
func githubSlug(heading string) string {
	text := slugLink.ReplaceAllString(heading, "$1")
	text = slugHTML.ReplaceAllString(text, "")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// markdownSection returns the text under the level-2 heading named title, up to the next level-2
// heading.
func markdownSection(md, title string) string {
	lines := strings.Split(md, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "## ") {
			if start >= 0 {
				return strings.Join(lines[start:i], "\n")
			}
			if strings.TrimSpace(strings.TrimPrefix(l, "## ")) == title {
				start = i + 1
			}
		}
	}
	if start < 0 {
		return ""
	}
	return strings.Join(lines[start:], "\n")
}
