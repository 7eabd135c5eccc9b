package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMain runs the command itself when asked to (FLAGS_TEST_RUN_MAIN), so that a test reads the
// flags it really takes from its usage.
func TestMain(m *testing.M) {
	if os.Getenv("FLAGS_TEST_RUN_MAIN") != "" {
		os.Args = []string{"address-controller", "-help"}
		main()
		return
	}
	os.Exit(m.Run())
}

// TestREADMEDocumentsEveryFlag: the README's "Running it" table names every flag the command
// takes (zap's logging flags beyond the two it names are covered by its "...").
func TestREADMEDocumentsEveryFlag(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLAGS_TEST_RUN_MAIN=1")
	out, _ := cmd.CombinedOutput() // -help exits 0 or 2 depending on the flag package; the usage is what counts
	flags := regexp.MustCompile(`(?m)^  -([a-z][a-z0-9.-]*)`).FindAllStringSubmatch(string(out), -1)
	if len(flags) < 10 {
		t.Fatalf("the command's usage lists %d flags:\n%s", len(flags), out)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, running, _ := strings.Cut(string(readme), "\n## Running it\n")
	running, _, _ = strings.Cut(running, "\n## ")
	for _, f := range flags {
		name := f[1]
		if strings.HasPrefix(name, "test.") || (strings.HasPrefix(name, "zap-") && name != "zap-log-level" && name != "zap-encoder") {
			continue
		}
		if !strings.Contains(running, "`--"+name+"`") {
			t.Errorf("README.md, Running it: --%s is not documented", name)
		}
	}
}
