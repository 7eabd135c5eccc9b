// Package images builds the controllers' container images without a Docker engine: static Go
// binaries for each platform on an empty base, assembled with go-containerregistry into a
// multi-arch OCI index. Builds are reproducible — no timestamps, fixed file metadata, trimmed
// paths — so one commit always yields one digest.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
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

// Build compiles img for every platform and returns the multi-arch index.
func Build(ctx context.Context, img Image, opts Options) (v1.ImageIndex, error) {
	platforms := opts.Platforms
	if len(platforms) == 0 {
		platforms = DefaultPlatforms
	}
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		say(opts.Progress, "[%s] compiling for %s/%s", img.Name, p.OS, p.Architecture)
		bin, err := compile(ctx, img, p, opts)
		if err != nil {
			return nil, err
		}
		image, err := assemble(img.Name, bin, p, opts)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", img.Name, p.OS, p.Architecture, err)
		}
		platform := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: image, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	return idx, nil
}

func compile(ctx context.Context, img Image, p v1.Platform, opts Options) ([]byte, error) {
	dir, err := os.MkdirTemp("", "image-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, img.Name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= -X main.version="+opts.Version, "-o", out, img.Package)
	cmd.Dir = opts.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s for %s/%s: %w\n%s", img.Name, p.OS, p.Architecture, err, b)
	}
	return os.ReadFile(out)
}

// epoch is the timestamp of every file and of the image itself.
var epoch = time.Unix(0, 0).UTC()

func assemble(name string, bin []byte, p v1.Platform, opts Options) (v1.Image, error) {
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
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.source":   opts.Source,
		"org.opencontainers.image.revision": opts.Revision,
		"org.opencontainers.image.version":  opts.Version,
		"org.opencontainers.image.title":    name,
	}
	return mutate.ConfigFile(image, cfg)
}

func say(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
