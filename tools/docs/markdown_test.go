package docs

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
	"golang.org/x/net/html"
)

// markdownFiles lists the repository's Markdown files (slash-separated, relative to root),
// leaving out what is not the project's own text: build output, local state, and the chart
// copies vendored into packages/ (make vendor-charts keeps them equal to charts/).
func markdownFiles(root string) ([]string, error) { return projectFiles(root, ".md") }

// projectFiles lists the repository's files whose name ends in suffix, leaving out the same as
// markdownFiles (and test data, vendored code and build output for any suffix).
func projectFiles(root, suffix string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules" || d.Name() == "vendor" || d.Name() == "testdata":
				return filepath.SkipDir
			case strings.HasPrefix(rel, "packages/system/") && strings.HasSuffix(rel, "/charts"):
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, suffix) {
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

// The parser every check reads Markdown with: CommonMark with GitHub's extensions (tables,
// strikethrough, task lists, bare URLs as links), as GitHub renders the repository's pages.
var markdownParser = goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser()

// page is a Markdown text parsed into goldmark's syntax tree.
type page struct {
	src   []byte
	doc   ast.Node
	lines []int // the offset at which each line starts
}

func parsePage(md string) *page {
	src := []byte(md)
	p := &page{src: src, doc: markdownParser.Parse(text.NewReader(src)), lines: []int{0}}
	for i, c := range src {
		if c == '\n' {
			p.lines = append(p.lines, i+1)
		}
	}
	return p
}

// line is the 1-based line of a byte offset.
func (p *page) line(offset int) int {
	return sort.Search(len(p.lines), func(i int) bool { return p.lines[i] > offset })
}

// lineText is the text of a 1-based line, without its newline.
func (p *page) lineText(n int) (string, bool) {
	if n < 1 || n > len(p.lines) {
		return "", false
	}
	end := len(p.src)
	if n < len(p.lines) {
		end = p.lines[n] - 1
	}
	return string(p.src[p.lines[n-1]:end]), true
}

// walk calls f on every node in document order.
func (p *page) walk(f func(n ast.Node)) {
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			f(n)
		}
		return ast.WalkContinue, nil
	})
}

// link is the target of a link, an image or a link reference definition, with its line.
type link struct {
	target string
	line   int
}

// links returns the targets of the page's links: inline links and images, link reference
// definitions (a reference link is checked through its definition), and the href and src of
// HTML a and img elements. Code is not text: nothing in code spans or code blocks counts.
func (p *page) links() []link {
	var out []link
	p.walk(func(n ast.Node) {
		switch n := n.(type) {
		case *ast.Link:
			if n.Reference == nil {
				out = append(out, link{string(n.Destination), p.line(p.pos(n))})
			}
		case *ast.Image:
			if n.Reference == nil {
				out = append(out, link{string(n.Destination), p.line(p.pos(n))})
			}
		case *ast.LinkReferenceDefinition:
			out = append(out, link{string(n.Destination), p.line(n.Pos())})
		case *ast.RawHTML:
			for _, a := range htmlAttrs(string(n.Segments.Value(p.src))) {
				if a.link != "" {
					out = append(out, link{a.link, p.line(n.Segments.At(0).Start)})
				}
			}
		case *ast.HTMLBlock:
			for _, a := range htmlAttrs(p.blockText(n)) {
				if a.link != "" {
					out = append(out, link{a.link, p.line(n.Pos())})
				}
			}
		}
	})
	return out
}

// pos is where a node starts: its own position, else its first text's, else its parent's.
func (p *page) pos(n ast.Node) int {
	if n.Pos() >= 0 {
		return n.Pos()
	}
	for c := n.FirstChild(); c != nil; c = c.FirstChild() {
		if t, ok := c.(*ast.Text); ok {
			return t.Segment.Start
		}
	}
	if n.Parent() != nil {
		return p.pos(n.Parent())
	}
	return 0
}

// blockText is the source of a block's lines.
func (p *page) blockText(n ast.Node) string {
	var b strings.Builder
	lines := n.Lines()
	for i := range lines.Len() {
		seg := lines.At(i)
		b.Write(seg.Value(p.src))
	}
	if h, ok := n.(*ast.HTMLBlock); ok && h.HasClosure() {
		b.Write(h.ClosureLine.Value(p.src))
	}
	return b.String()
}

// htmlAttr is what an HTML tag contributes: a link (a href, img src) or an anchor (a name, a id).
type htmlAttr struct{ link, anchor string }

// htmlAttrs reads the start tags of a piece of HTML with the x/net/html tokenizer.
func htmlAttrs(s string) []htmlAttr {
	var out []htmlAttr
	z := html.NewTokenizer(strings.NewReader(s))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return out
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		tok := z.Token()
		for _, a := range tok.Attr {
			switch {
			case tok.Data == "a" && a.Key == "href", tok.Data == "img" && a.Key == "src":
				out = append(out, htmlAttr{link: a.Val})
			case tok.Data == "a" && (a.Key == "name" || a.Key == "id"):
				out = append(out, htmlAttr{anchor: a.Val})
			}
		}
	}
}

// heading is a heading of a page with the anchor GitHub gives it.
type heading struct {
	level  int
	text   string // its text as GitHub renders it, without markup
	anchor string
	node   *ast.Heading
}

// headings returns the page's headings, each with the anchor GitHub gives it: its rendered text
// made a slug (githubSlug), and a repeated slug made unique with -1, -2, ... in page order.
func (p *page) headings() []heading {
	var out []heading
	seen := map[string]int{}
	p.walk(func(n ast.Node) {
		h, ok := n.(*ast.Heading)
		if !ok {
			return
		}
		t := p.plainText(h)
		out = append(out, heading{level: h.Level, text: t, anchor: uniqueSlug(seen, githubSlug(t)), node: h})
	})
	return out
}

// uniqueSlug makes slug unique among those seen: GitHub appends -1, -2, ... to a repeated one,
// skipping any that an earlier heading already has.
func uniqueSlug(seen map[string]int, slug string) string {
	id := slug
	for {
		if _, taken := seen[id]; !taken {
			break
		}
		seen[slug]++
		id = fmt.Sprintf("%s-%d", slug, seen[slug])
	}
	seen[id] = 0
	return id
}

// githubSlug is the anchor GitHub derives from a heading's rendered text: lower-cased, every
// character but letters, marks, decimal and letter numbers, connector punctuation (such as
// '_'), hyphens and spaces dropped, and each space made a hyphen.
func githubSlug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.M, unicode.Nd, unicode.Nl, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// plainText is a node's text as a browser shows it: the text of its inlines with escapes and
// entities resolved, code spans as written, links by their text, bare URLs as written; images
// and HTML tags add nothing.
func (p *page) plainText(n ast.Node) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Image, *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		case *ast.CodeSpan:
			for t := c.FirstChild(); t != nil; t = t.NextSibling() {
				switch t := t.(type) {
				case *ast.Text:
					b.Write(t.Value(p.src))
				case *ast.String:
					b.Write(t.Value)
				}
			}
			return ast.WalkSkipChildren, nil
		case *ast.AutoLink:
			b.Write(c.Label(p.src))
			return ast.WalkSkipChildren, nil
		case *ast.Text:
			b.Write(resolve(c.Value(p.src), c.IsRaw()))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte('\n')
			}
		case *ast.String:
			b.Write(resolve(c.Value, c.IsRaw() || c.IsCode()))
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// resolve is inline text as rendered: backslash escapes and entity references resolved.
func resolve(v []byte, raw bool) []byte {
	if raw {
		return v
	}
	return util.UnescapePunctuations(util.ResolveEntityNames(util.ResolveNumericReferences(v)))
}

// anchors lists the fragments the page answers to on GitHub: one per heading, and the names
// and ids of its HTML a elements, lower-cased.
func (p *page) anchors() []string {
	var out []string
	for _, h := range p.headings() {
		out = append(out, h.anchor)
	}
	p.walk(func(n ast.Node) {
		var s string
		switch n := n.(type) {
		case *ast.RawHTML:
			s = string(n.Segments.Value(p.src))
		case *ast.HTMLBlock:
			s = p.blockText(n)
		default:
			return
		}
		for _, a := range htmlAttrs(s) {
			if a.anchor != "" {
				out = append(out, strings.ToLower(a.anchor))
			}
		}
	})
	return out
}

// anchors parses md and lists its anchors (page.anchors).
func anchors(md string) []string { return parsePage(md).anchors() }

// section returns the blocks under the heading of the given level whose text is title, up to
// the next heading of that level or a higher one; nil when there is no such heading.
func (p *page) section(level int, title string) []ast.Node {
	var out []ast.Node
	for n := p.doc.FirstChild(); n != nil; n = n.NextSibling() {
		h, ok := n.(*ast.Heading)
		if !ok || h.Level != level || strings.TrimSpace(p.plainText(h)) != title {
			continue
		}
		for m := n.NextSibling(); m != nil; m = m.NextSibling() {
			if h, ok := m.(*ast.Heading); ok && h.Level <= level {
				break
			}
			out = append(out, m)
		}
		return out
	}
	return nil
}

// codeSpans returns the text of the code spans under nodes.
func (p *page) codeSpans(nodes ...ast.Node) []string {
	var out []string
	for _, n := range nodes {
		_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
			if cs, ok := c.(*ast.CodeSpan); ok && entering {
				out = append(out, p.plainText(cs))
				return ast.WalkSkipChildren, nil
			}
			return ast.WalkContinue, nil
		})
	}
	return out
}

// linksUnder returns the link targets of page whose lines fall within nodes.
func (p *page) linksUnder(nodes []ast.Node) []string {
	var out []string
	for _, n := range nodes {
		sub := &page{src: p.src, doc: n, lines: p.lines}
		for _, l := range sub.links() {
			out = append(out, l.target)
		}
	}
	return out
}

// codeBlock is a fenced code block: its info string's first word and its text.
type codeBlock struct {
	lang, text string
	line       int
}

// codeBlocks returns the page's fenced code blocks.
func (p *page) codeBlocks() []codeBlock {
	var out []codeBlock
	p.walk(func(n ast.Node) {
		if f, ok := n.(*ast.FencedCodeBlock); ok {
			out = append(out, codeBlock{lang: string(f.Language(p.src)), text: p.blockText(f), line: p.line(f.Pos())})
		}
	})
	return out
}

// fenceProblems reports the fenced code blocks that do not end where their author meant them
// to. CommonMark closes a block only at a line holding nothing but a run of its fence
// character at least as long as the opening one: "``` more text" is content, and so is a
// fence with an info string, so a block whose intended end carries text runs on, swallowing
// the headings and links below it until the next bare fence (or the end of the page). Two
// things give that away, and both are reported:
//   - a line inside the block that starts with such a run (an intended closing fence with text
//     after it, or the opening fence of the next block);
//   - a block that no fence closes (it ends with its container or the page).
func (p *page) fenceProblems() []string {
	var out []string
	p.walk(func(n ast.Node) {
		f, ok := n.(*ast.FencedCodeBlock)
		if !ok {
			return
		}
		open := p.line(f.Pos())
		opening, _ := p.lineText(open)
		char, length := fenceRun(opening)
		if length == 0 {
			out = append(out, fmt.Sprintf("line %d: cannot find the opening fence of a code block", open))
			return
		}
		last := open
		lines := f.Lines()
		for i := range lines.Len() {
			seg := lines.At(i)
			last = p.line(seg.Start)
			content := strings.TrimLeft(string(seg.Value(p.src)), " \t")
			if c, l := fenceRun(content); c == char && l >= length {
				out = append(out, fmt.Sprintf("line %d: %q is inside the code block opened on line %d, not its end (a closing fence takes nothing after it): put any text on a line of its own, and close a block before opening the next",
					last, strings.TrimSpace(content), open))
			}
		}
		closing, ok := p.lineText(last + 1)
		if c, l := fenceRun(closing); !ok || c != char || l < length || strings.TrimSpace(strings.TrimLeft(strings.TrimLeft(closing, " \t>"), string(char))) != "" {
			out = append(out, fmt.Sprintf("line %d: the code block opened here is never closed by a fence of its own", open))
		}
	})
	return out
}

// fenceRun returns the fence character a line starts with (after indentation and blockquote
// markers) and how many times it repeats, when that is a fence's run of three or more.
func fenceRun(line string) (byte, int) {
	line = strings.TrimLeft(line, " \t>")
	if line == "" || (line[0] != '`' && line[0] != '~') {
		return 0, 0
	}
	n := len(line) - len(strings.TrimLeft(line, line[:1]))
	if n < 3 {
		return 0, 0
	}
	return line[0], n
}

// markdownWords splits a Markdown page into normalised words: the text of its paragraphs,
// headings, lists and tables, the words of code spans marked as code, link targets and HTML
// left out, and a break (brk) for every code block, whose words are not prose.
func markdownWords(md string) []word {
	p := parsePage(md)
	var out []word
	var run strings.Builder
	runLine := 0
	flush := func() {
		if run.Len() > 0 {
			out = append(out, splitWords(run.String(), runLine, false)...)
			run.Reset()
		}
	}
	add := func(s []byte, at int) {
		if run.Len() == 0 {
			runLine = p.line(at)
		}
		run.Write(s)
	}
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			if n.Type() == ast.TypeBlock {
				flush()
			}
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.FencedCodeBlock, *ast.CodeBlock, *ast.HTMLBlock:
			flush()
			out = append(out, brk)
			return ast.WalkSkipChildren, nil
		case *ast.CodeSpan:
			flush()
			at := p.pos(n)
			out = append(out, splitWords(p.plainText(n), p.line(at), true)...)
			return ast.WalkSkipChildren, nil
		case *ast.RawHTML, *ast.Image:
			add([]byte(" "), p.pos(n))
			return ast.WalkSkipChildren, nil
		case *ast.AutoLink:
			return ast.WalkSkipChildren, nil
		case *ast.Text:
			add(resolve(n.Value(p.src), n.IsRaw()), n.Segment.Start)
			if n.SoftLineBreak() || n.HardLineBreak() {
				run.WriteByte('\n')
			}
		case *ast.String:
			add(resolve(n.Value, n.IsRaw() || n.IsCode()), p.pos(n))
		}
		return ast.WalkContinue, nil
	})
	flush()
	return out
}
