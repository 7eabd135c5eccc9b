package docs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every fenced code block of the repository's Markdown ends where its author meant it to: no
// line inside a block starts with its fence (text after a closing fence leaves the block open,
// and the headings and links below it render as code), and a fence of its own closes every
// block.
func TestMarkdownFencesClose(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		p := parsePage(string(data))
		blocks += len(p.codeBlocks())
		for _, problem := range p.fenceProblems() {
			t.Errorf("%s: %s", f, problem)
		}
	}
	if blocks < 50 {
		t.Fatalf("found only %d fenced code blocks: the parser no longer sees them", blocks)
	}
}

// testdata/fence-left-open reproduces a defect docs/tenant-guide.md had: "``` text" after a
// shell block is not a closing fence, so its "Auto-claim" section parsed as code and the links
// into it were dead. The fence check names the line, and the link check finds the dead links;
// with the text moved to a line of its own, both pass and the section has its anchor again.
func TestChecksCatchAFenceLeftOpen(t *testing.T) {
	root := filepath.Join("testdata", "fence-left-open")
	guide := filepath.Join(root, "docs", "guide.md")
	data, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	broken := parsePage(string(data))
	problems := broken.fenceProblems()
	if len(problems) == 0 || !strings.HasPrefix(problems[0], "line 14: \"``` Clearing the whole `claimRef` instead would\" is inside the code block opened on line 11") {
		t.Errorf("the fence check reports %q, want the line of \"``` Clearing\" inside the block opened on line 11", problems)
	}
	if slices.Contains(broken.anchors(), "auto-claim") {
		t.Error("the section under the open fence has its anchor: the parser does not see the fence left open")
	}
	var dead []string
	for _, f := range []string{"README.md", "docs/guide.md"} {
		ps, _, err := checkLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, ps...)
	}
	if len(dead) != 2 || !strings.Contains(dead[0], "docs/guide.md#auto-claim") || !strings.Contains(dead[1], "#auto-claim") {
		t.Errorf("the link check reports %q, want the two links to #auto-claim", dead)
	}

	// The same page with the text on a line of its own passes both checks.
	fixed := parsePage(strings.Replace(string(data), "``` Clearing", "```\n\nClearing", 1))
	if ps := fixed.fenceProblems(); len(ps) != 0 {
		t.Errorf("the fixed page still has fence problems: %q", ps)
	}
	if !slices.Contains(fixed.anchors(), "auto-claim") {
		t.Errorf("the fixed page has no #auto-claim anchor: %v", fixed.anchors())
	}
}

// The fence check allows what CommonMark closes as meant (a longer fence around shorter ones, a
// tilde fence around backticks, fences in lists and quotes, a closing fence longer than the
// opening one) and reports a block that no fence closes.
func TestFenceCheck(t *testing.T) {
	for _, tc := range []struct {
		name, md string
		problems int
	}{
		{"plain", "```sh\nls\n```\n", 0},
		{"longer fence around a shorter one", "````markdown\n```sh\nls\n```\n````\n", 0},
		{"tildes around backticks", "~~~\n```\n~~~\n", 0},
		{"longer closing fence", "```\nls\n`````\n", 0},
		{"empty block", "```\n```\n", 0},
		{"in a list item", "- step:\n\n  ```sh\n  ls\n  ```\n- next\n", 0},
		{"in a quote", "> ```\n> ls\n> ```\n", 0},
		{"an opening fence inside a block", "```sh\nls\n\n```yaml\na: 1\n```\n", 1},
		{"text after the closing fence", "```\nls\n``` and then\n\nmore\n", 2}, // also never closed
		{"never closed", "text\n\n```sh\nls\n", 1},
		{"closed by the end of its list item", "- ```sh\n  ls\n\nafter\n", 1},
	} {
		if got := parsePage(tc.md).fenceProblems(); len(got) != tc.problems {
			t.Errorf("%s: %d problems %q, want %d", tc.name, len(got), got, tc.problems)
		}
	}
}
