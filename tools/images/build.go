// Package images builds the controllers' container images without a Docker engine: static Go
// binaries for each platform on an empty base, assembled with go-containerregistry into a
// multi-arch OCI index. Builds are reproducible — no timestamps, fixed file metadata, trimmed
// paths — so one commit always yields one digest.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image describes one of the project's images.
type Image struct {
	// Name is the command and the repository name (address-controller, metallb-iad).
	Name string
	// Package is the main package, relative to the checkout.
	Package string
}

// Images are the project's images.
var Images = []Image{
	{Name: "address-controller", Package: "./address-controller/cmd/address-controller"},
	{Name: "metallb-iad", Package: "./metallb-iad/cmd/metallb-iad"},
}

// DefaultPlatforms are the platforms every image is built for.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// ParsePlatforms reads a comma-separated list of OS/architecture pairs ("linux/amd64,linux/arm64").
func ParsePlatforms(list string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, item := range strings.Split(list, ",") {
		goos, arch, ok := strings.Cut(strings.TrimSpace(item), "/")
		if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("platform %q is not OS/ARCH (for example linux/arm64)", item)
		}
		out = append(out, v1.Platform{OS: goos, Architecture: arch})
	}
	return out, nil
}

// Options says what to stamp into an image.
type Options struct {
	// Root is the checkout.
	Root string
	// Version and Revision are stamped into the binary (main.version) and the OCI labels.
	Version, Revision string
	// Source is the repository URL for the org.opencontainers.image.source label.
	Source string
	// Platforms defaults to DefaultPlatforms.
	Platforms []v1.Platform
	// Progress receives a line per step.
	Progress io.Writer
}

// NonRootUID is the user the images run as.
const NonRootUID = 65532

// Built is one image: its multi-arch index and, per platform, an SBOM artifact that names the
// platform's image as its subject (an OCI referrer).
type Built struct {
	Index v1.ImageIndex
	// SBOMs are the referrers, one per platform, in the order of the index's manifests.
	SBOMs []v1.Image
	// GoVersion is the toolchain that compiled the binaries.
	GoVersion string
}

// Build compiles img for every platform and returns the multi-arch index (annotated with the
// source, revision, version and toolchain) and an SPDX SBOM referrer per platform image.
func Build(ctx context.Context, img Image, opts Options) (*Built, error) {
	platforms := opts.Platforms
	if len(platforms) == 0 {
		platforms = DefaultPlatforms
	}
	out := &Built{}
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		say(opts.Progress, "[%s] compiling for %s/%s", img.Name, p.OS, p.Architecture)
		bin, err := compile(ctx, img, p, opts)
		if err != nil {
			return nil, err
		}
		goVersion, err := toolchain(bin)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", img.Name, p.OS, p.Architecture, err)
		}
		out.GoVersion = goVersion
		image, err := assemble(img.Name, bin, p, goVersion, opts)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", img.Name, p.OS, p.Architecture, err)
		}
		platform := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: image, Descriptor: v1.Descriptor{Platform: &platform}})

		sbom, err := SBOM(bin, img.Name, p, opts)
		if err != nil {
			return nil, err
		}
		subject, err := partial.Descriptor(image)
		if err != nil {
			return nil, err
		}
		artifact, err := NewSBOMArtifact(sbom, *subject, map[string]string{
			"org.opencontainers.image.created":  epoch.Format(time.RFC3339),
			"org.opencontainers.image.title":    img.Name + " SBOM (" + p.OS + "/" + p.Architecture + ")",
			"org.opencontainers.image.revision": opts.Revision,
		})
		if err != nil {
			return nil, err
		}
		out.SBOMs = append(out.SBOMs, artifact)
	}
	out.Index = mutate.Annotations(idx, annotations(img.Name, out.GoVersion, opts)).(v1.ImageIndex)
	return out, nil
}

// annotations are the OCI annotations of the index (registries read these for multi-arch
// images) and the labels of every image config.
func annotations(name, goVersion string, opts Options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   opts.Source,
		"org.opencontainers.image.revision": opts.Revision,
		"org.opencontainers.image.version":  opts.Version,
		"org.opencontainers.image.title":    name,
		"org.opencontainers.image.created":  epoch.Format(time.RFC3339),
		"org.opencontainers.image.url":      opts.Source,
		AnnotationGoVersion:                 goVersion,
	}
}

func toolchain(bin []byte) (string, error) {
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("reading the build info: %w", err)
	}
	return bi.GoVersion, nil
}

// GoBuildFlags are the flags every image's binary is built with (CGO_ENABLED=0): the
// Dockerfiles use the same, and a test holds them to it.
func GoBuildFlags(version string) []string {
	return []string{"-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid= -X main.version=" + version}
}

func compile(ctx context.Context, img Image, p v1.Platform, opts Options) ([]byte, error) {
	dir, err := os.MkdirTemp("", "image-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, img.Name)
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, GoBuildFlags(opts.Version)...), "-o", out, img.Package)...)
	cmd.Dir = opts.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s for %s/%s: %w\n%s", img.Name, p.OS, p.Architecture, err, b)
	}
	return os.ReadFile(out)
}

// epoch is the timestamp of every file and of the image itself.
var epoch = time.Unix(0, 0).UTC()

func assemble(name string, bin []byte, p v1.Platform, goVersion string, opts Options) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/" + name, Mode: 0o755,
		Size: int64(len(bin)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	image, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "tools/images: " + name + " " + opts.Version}})
	if err != nil {
		return nil, err
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{"/usr/local/bin/" + name}
	cfg.Config.User = fmt.Sprintf("%d:%d", NonRootUID, NonRootUID)
	cfg.Config.Labels = annotations(name, goVersion, opts)
	return mutate.ConfigFile(image, cfg)
}

func say(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
