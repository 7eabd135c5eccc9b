package chartdocs

import (
	"strings"
	"testing"
)

func TestRows(t *testing.T) {
	values := `
# -- Image reference.
image: ghcr.io/x/y@sha256:abc
# -- Run the controller. Set to false to install only the API and
# run it elsewhere.
deploy: true
serviceAccount:
  # -- Name of the ServiceAccount.
  name: sa
  # -- Annotations.
  annotations: {}

# -- Container resources.
resources:
  limits:
    memory: 512Mi
# -- Pipe | in text.
empty: ""
`
	rows, err := Rows([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{"image", "ghcr.io/x/y@sha256:abc", "Image reference."},
		{"deploy", "true", "Run the controller. Set to false to install only the API and run it elsewhere."},
		{"serviceAccount.name", "sa", "Name of the ServiceAccount."},
		{"serviceAccount.annotations", "{}", "Annotations."},
		{"resources", `{"limits":{"memory":"512Mi"}}`, "Container resources."},
		{"empty", `""`, "Pipe | in text."},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
	if table := Table(rows); !strings.Contains(table, `Pipe \| in text.`) {
		t.Errorf("pipes not escaped:\n%s", table)
	}
}

func TestUndocumentedLeafIsAnError(t *testing.T) {
	if _, err := Rows([]byte("# a plain comment\nworkers: 4\n")); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Errorf("error %v, want one naming workers", err)
	}
}

func TestSplice(t *testing.T) {
	got, err := Splice("intro\n"+Begin+"\nold\n"+End+"\nrest\n", "| t |\n")
	if err != nil {
		t.Fatal(err)
	}
	if got != "intro\n"+Begin+"\n| t |\n"+End+"\nrest\n" {
		t.Errorf("got %q", got)
	}
	if _, err := Splice("no markers", "x"); err == nil {
		t.Error("a README without markers is not an error")
	}
}
