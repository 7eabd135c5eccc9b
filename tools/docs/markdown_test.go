package docs

import (
	"io/fs"
	"path/filepath"
	"strings"
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
