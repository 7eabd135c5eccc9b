package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sharedDir holds the reference pages the project was given (the product page, the contract,
// the gathered facts). They are on the machines the project is written on, not in its checkout.
const sharedDir = "/work/shared"

// minProse is the number of prose words (words outside code) a shared run must hold to count as
// copied text. Shorter runs, and runs made mostly of annotation names, field paths and commands,
// are the vocabulary both sides have to use.
const minProse = 9

// The project's documentation is written in its own words: no Markdown page shares a run of
// prose with the reference pages in sharedDir. Code is allowed: fenced blocks are left out
// and words inside code spans (or tokens such as metallb.io/address-pool) do not count towards
// minProse. Skipped where the reference pages are absent (CI's checkout).
func TestDocsDoNotCopyTheReferencePages(t *testing.T) {
	if _, err := os.Stat(sharedDir); err != nil {
		t.Skipf("%s is not here (%v); nothing to compare against", sharedDir, err)
	}
	shingles, err := referenceShingles(sharedDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(shingles) < 1000 {
		t.Fatalf("read only %d word sequences from %s", len(shingles), sharedDir)
	}
	root := filepath.Join("..", "..")
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		// Generated from the CRDs' field descriptions, and dated records kept as written.
		if f == "docs/api-reference.md" || strings.HasPrefix(f, "docs/notes/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, r := range copiedRuns(string(data), shingles) {
			t.Errorf("%s:%d shares %d words (%d of them prose) with %s: %q", f, r.line, r.words, r.prose, r.source, r.text)
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d Markdown files", checked)
	}
}

// The checker flags a sentence lifted with a code span in it, and leaves alone a run of
// identifiers, a fenced block, and a short common phrase.
func TestCopyCheckerCatchesACopiedSentence(t *testing.T) {
	reference := "Claims, addresses and classes carry finalizers that the core removes, and the " +
		"driver adds its own to the addresses it creates. A Service names the claim with the " +
		"annotation local.sdn.cozystack.io/ip-address-claim: web and the placeholder goes.\n" +
		"apiVersion: cozystack.io/v1alpha1\nkind: Package\nmetadata:\n  name: cozystack.cozystack-platform\n" +
		"spec:\n  variant: isp-full\n"
	shingles := shingleWords(words(reference, false), "ref.txt")
	for _, tc := range []struct {
		name, md string
		want     int
	}{
		{"copied sentence", "Intro.\n\nClaims, addresses and classes carry finalizers the core\nremoves, and the driver adds its own to `addresses`.\n", 1},
		{"identifiers", "Name it with the annotation `local.sdn.cozystack.io/ip-address-claim: web`.\n", 0},
		{"bare identifiers", "Name it with the annotation local.sdn.cozystack.io/ip-address-claim: web, always.\n", 0},
		{"fenced block", "Enable it:\n\n```yaml\napiVersion: cozystack.io/v1alpha1\nkind: Package\nmetadata:\n  name: cozystack.cozystack-platform\nspec:\n  variant: isp-full\n```\n", 0},
		{"short phrase", "The driver adds its own to addresses, later.\n", 0},
	} {
		got := copiedRuns(tc.md, shingles)
		if len(got) != tc.want {
			t.Errorf("%s: %d runs flagged, want %d: %+v", tc.name, len(got), tc.want, got)
		}
	}
}

// word is one normalised word of a text: lower case, punctuation dropped. code says it stood
// in a code span or in a token such as a field path or an annotation name.
type word struct {
	w    string
	line int
	code bool
}

var (
	wordRE = regexp.MustCompile(`[a-z0-9]+(?:'[a-z0-9]+)*`)
	// A token with a dot, slash, underscore, colon or equals sign between letters or digits is an
	// identifier (metallb.io/address-pool, spec.loadBalancerIP, system:masters), not prose.
	identRE = regexp.MustCompile(`[A-Za-z0-9][./_:=][A-Za-z0-9]`)
)

// brk separates words that are not adjacent in the text (either side of a fenced block).
var brk = word{w: "\x00"}

// words splits a text into normalised words. Markdown is parsed (markdownWords): code blocks
// become breaks, link targets and HTML tags are dropped, and words of code spans are marked as
// code.
func words(text string, markdown bool) []word {
	text = strings.NewReplacer("’", "'", "‘", "'", "&nbsp;", " ", "&amp;", "&").Replace(text)
	if !markdown {
		return splitWords(text, 1, false)
	}
	return markdownWords(text)
}

// splitWords normalises the words of plain text starting at the given line.
func splitWords(text string, line int, code bool) []word {
	var out []word
	for _, l := range strings.Split(text, "\n") {
		for _, tok := range strings.Fields(l) {
			c := code || identRE.MatchString(tok)
			for _, w := range wordRE.FindAllString(strings.ToLower(tok), -1) {
				out = append(out, word{w: w, line: line, code: c})
			}
		}
		line++
	}
	return out
}

// shingle is a sequence of minProse words joined by spaces.
func shingle(ws []word) (string, bool) {
	parts := make([]string, len(ws))
	for i, w := range ws {
		if w.w == brk.w {
			return "", false
		}
		parts[i] = w.w
	}
	return strings.Join(parts, " "), true
}

// shingleWords indexes every sequence of minProse consecutive words, with where it occurs.
func shingleWords(ws []word, source string) map[string]string {
	out := map[string]string{}
	for i := 0; i+minProse <= len(ws); i++ {
		if s, ok := shingle(ws[i : i+minProse]); ok {
			if _, seen := out[s]; !seen {
				out[s] = fmt.Sprintf("%s:%d", source, ws[i].line)
			}
		}
	}
	return out
}

// referenceShingles reads the reference pages (the Markdown and text files under dir; not the
// scripts beside them).
func referenceShingles(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".md") || strings.HasSuffix(path, ".txt")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		for s, where := range shingleWords(words(string(data), strings.HasSuffix(path, ".md")), filepath.ToSlash(rel)) {
			if _, seen := out[s]; !seen {
				out[s] = where
			}
		}
		return nil
	})
	return out, err
}

// run is a stretch of a page whose every minProse-word window occurs in a reference page.
type run struct {
	line, words, prose int
	source, text       string
}

// copiedRuns returns the maximal shared runs of a Markdown page that hold at least minProse
// prose words.
func copiedRuns(md string, shingles map[string]string) []run {
	ws := words(md, true)
	var out []run
	for i := 0; i+minProse <= len(ws); {
		s, ok := shingle(ws[i : i+minProse])
		source, hit := shingles[s]
		if !ok || !hit {
			i++
			continue
		}
		j := i
		for j+1+minProse <= len(ws) {
			next, ok := shingle(ws[j+1 : j+1+minProse])
			if _, hit := shingles[next]; !ok || !hit {
				break
			}
			j++
		}
		stretch := ws[i : j+minProse]
		r := run{line: stretch[0].line, words: len(stretch), source: source}
		texts := make([]string, len(stretch))
		for k, w := range stretch {
			texts[k] = w.w
			if !w.code {
				r.prose++
			}
		}
		r.text = strings.Join(texts, " ")
		if r.prose >= minProse {
			out = append(out, r)
		}
		i = j + 1
	}
	return out
}
