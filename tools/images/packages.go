package images

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// UpdatePackageValues points a package's wrapper chart at a newly released image: it rewrites
// the "image:" line under "<name>:" in packages/system/<name>/values.yaml, keeping everything
// else (comments included) as it is.
func UpdatePackageValues(packagesDir, name, ref string) error {
	path := filepath.Join(packagesDir, "system", name, "values.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	re := regexp.MustCompile(`(?m)^(` + regexp.QuoteMeta(name) + `:\n(?:[ \t]+#.*\n)*[ \t]+image:[ \t]*).*$`)
	if !re.Match(data) {
		return fmt.Errorf("%s has no %s.image value to update", path, name)
	}
	out := re.ReplaceAll(data, []byte("${1}"+ref))
	return os.WriteFile(path, out, 0o644)
}
