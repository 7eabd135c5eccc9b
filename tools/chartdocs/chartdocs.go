// Package chartdocs renders a chart's README.md with helm-docs, pinned by the tool directive of
// tools/binaries/helm-docs: README.md.gotmpl holds the prose and places the value table, which
// helm-docs builds from the "# --" comments of values.yaml, in file order.
//
// helm-docs itself exits 0 when a chart's template fails, after logging a warning and leaving an
// empty or partial README.md behind (v1.14.2). So helm-docs renders with --dry-run, any warning
// it logs is an error, and the README is written here, only from a complete rendering.
package chartdocs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Pin is the module that pins helm-docs, relative to the repository's root.
const Pin = "tools/binaries/helm-docs"

// Args are helm-docs' arguments besides the chart: values in the order values.yaml has them,
// warnings and errors only.
var Args = []string{"--sort-values-order=file", "--log-level=warning"}

// Render returns the README.md that helm-docs renders for the chart in dir.
func Render(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	pin, err := findPin(abs)
	if err != nil {
		// A chart outside the checkout (a copy under test) is rendered with the checkout's pin.
		wd, _ := os.Getwd()
		if pin, err = findPin(wd); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(filepath.Join(abs, "README.md.gotmpl")); err != nil {
		return "", fmt.Errorf("%s: no README.md.gotmpl for helm-docs to render: %w", dir, err)
	}
	cmd := exec.Command("go", append([]string{"tool", "helm-docs", "--dry-run", "--chart-search-root=" + abs}, Args...)...)
	cmd.Dir = pin
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false -trimpath")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm-docs on %s: %w\n%s", dir, err, stderr.String())
	}
	if msg := warnings(stderr.String()); msg != "" {
		return "", fmt.Errorf("helm-docs on %s:\n%s", dir, msg)
	}
	if stdout.Len() == 0 {
		return "", fmt.Errorf("helm-docs rendered nothing for %s", dir)
	}
	return stdout.String(), nil
}

// warnings is what helm-docs said on stderr, without the go command's own progress lines
// ("go: downloading ..." while the module cache is cold), which say nothing about the chart.
func warnings(stderr string) string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "go: downloading ") || strings.TrimSpace(l) == "" {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// findPin walks up from dir to the repository's root, the folder holding Pin.
func findPin(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		pin := filepath.Join(d, filepath.FromSlash(Pin))
		if _, err := os.Stat(filepath.Join(pin, "go.mod")); err == nil {
			return pin, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no " + Pin + "/go.mod above " + dir)
		}
	}
}

// Generate returns the README.md of the chart in dir as it is and as helm-docs renders it.
func Generate(dir string) (current, regenerated string, err error) {
	data, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return "", "", err
	}
	out, err := Render(dir)
	return string(data), out, err
}

// Update writes the README.md of the chart in dir as helm-docs renders it, when it differs.
func Update(dir string) error {
	current, out, err := Generate(dir)
	if err != nil || out == current {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(out), 0o644)
}
