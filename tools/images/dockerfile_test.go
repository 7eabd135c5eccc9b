package images

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Dockerfiles build what `make images` builds: the same Go flags, no cgo, the same labels and
// user, base images pinned by digest, and a .dockerignore that keeps the context to sources.
func TestDockerfilesMatchTheReferenceBuild(t *testing.T) {
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", "bin", ".sandbox"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).Match(ignore) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	flags := GoBuildFlags("${VERSION}")
	wantBuild := strings.Join(flags[:3], " ") + ` "` + flags[3] + `"`
	for _, img := range Images {
		data, err := os.ReadFile(filepath.Join(repoRoot, img.Name, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		df := strings.ReplaceAll(string(data), "\\\n", " ")
		args := map[string]string{}
		for _, m := range regexp.MustCompile(`(?m)^ARG (\w+)=(\S+)$`).FindAllStringSubmatch(df, -1) {
			args[m[1]] = m[2]
		}
		for _, m := range regexp.MustCompile(`(?m)^FROM (?:--platform=\S+ )?(\S+)`).FindAllStringSubmatch(df, -1) {
			base := m[1]
			if strings.HasPrefix(base, "${") {
				base = args[strings.Trim(base, "${}")]
			}
			if base != "scratch" && !regexp.MustCompile(`@sha256:[0-9a-f]{64}$`).MatchString(base) {
				t.Errorf("%s: base image %q is not pinned by digest", img.Name, base)
			}
		}
		for _, want := range []string{"CGO_ENABLED=0", "go build " + wantBuild, "-o /out/" + img.Name + " " + img.Package,
			"USER 65532:65532", `ENTRYPOINT ["/usr/local/bin/` + img.Name + `"]`, "COPY --from=build /out/" + img.Name + " /usr/local/bin/" + img.Name} {
			if !strings.Contains(strings.Join(strings.Fields(df), " "), want) {
				t.Errorf("%s/Dockerfile lacks %q", img.Name, want)
			}
		}
		for key := range annotations(img.Name, "go1.26", Options{}) {
			if key == AnnotationGoVersion {
				continue // the toolchain is the pinned builder's
			}
			if !strings.Contains(df, key+"=") {
				t.Errorf("%s/Dockerfile does not set the label %s", img.Name, key)
			}
		}
	}
}
