// Package mirror copies the images the packages ship to a mirror registry by digest, with every
// platform, and proves the copy by reading it back: for air-gapped and mirrored installs.
package mirror

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"sigs.k8s.io/yaml"
)

// Options configures a mirror run.
type Options struct {
	// Dest is the registry and path prefix images are copied under (mirror.example.org/cozystack).
	Dest string
	// DryRun says what would be copied, and copies nothing.
	DryRun bool
	// Concurrency is how many images are copied at once (4 when zero).
	Concurrency int
	// Progress receives one line per step.
	Progress io.Writer
	// Remote are extra options for registry access (tests use plain HTTP on loopback).
	Remote []remote.Option
}

// Result is one image's outcome.
type Result struct {
	// Component is the Package component the image belongs to (address-controller, ...).
	Component string
	// Source and Dest are digest references.
	Source, Dest string
	// Copied is false when the destination already had the image (or on a dry run).
	Copied bool
}

// PackageImages reads the image references the packages ship: <component>.image in each
// packages/system/<component>/values.yaml.
func PackageImages(packagesDir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(packagesDir, "system", "*", "values.yaml"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var values map[string]map[string]any
		if err := yaml.Unmarshal(data, &values); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for component, v := range values {
			if img, ok := v["image"].(string); ok {
				out[component] = img
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no image values found under %s", packagesDir)
	}
	return out, nil
}

func (o Options) remote(ctx context.Context) []remote.Option {
	return append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, o.Remote...)
}

func (o Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// destination maps a source digest reference to the mirror: same repository name and tag under
// Dest, same digest.
func destination(dest string, src name.Digest, tag string) (name.Tag, name.Digest, error) {
	repo := src.Context().RepositoryStr()
	base := repo[strings.LastIndex(repo, "/")+1:]
	prefix := strings.TrimSuffix(dest, "/") + "/" + base
	t, err := name.NewTag(prefix + ":" + tag)
	if err != nil {
		return name.Tag{}, name.Digest{}, err
	}
	d, err := name.NewDigest(prefix + "@" + src.DigestStr())
	return t, d, err
}

// parse insists on a digest reference and returns it with its tag (if any).
func parse(ref string) (name.Digest, string, error) {
	at := strings.Index(ref, "@")
	if at < 0 {
		return name.Digest{}, "", fmt.Errorf("%s is not a digest reference (name[:tag]@sha256:...): mirrors copy by digest", ref)
	}
	d, err := name.NewDigest(ref)
	if err != nil {
		return name.Digest{}, "", fmt.Errorf("%s: %w", ref, err)
	}
	tag := "mirrored"
	if t, err := name.NewTag(ref[:at]); err == nil && strings.Contains(ref[:at], ":") && !strings.HasSuffix(t.TagStr(), "latest") {
		tag = t.TagStr()
	}
	return d, tag, nil
}

// Mirror copies each image (component → digest reference) to opts.Dest, every platform, skips
// what the destination already has, then reads the destination back and fails on any digest
// mismatch. Only verified images are returned as results; failures are joined in the error,
// each naming its image.
func Mirror(ctx context.Context, images map[string]string, opts Options) ([]Result, error) {
	return run(ctx, images, opts, func(ctx context.Context, src name.Digest) (remote.Taggable, error) {
		desc, err := remote.Get(src, opts.remote(ctx)...)
		if err != nil {
			return nil, err
		}
		if desc.MediaType.IsIndex() {
			return desc.ImageIndex()
		}
		return desc.Image()
	})
}

func run(ctx context.Context, images map[string]string, opts Options, fetch func(context.Context, name.Digest) (remote.Taggable, error)) ([]Result, error) {
	limit := opts.Concurrency
	if limit <= 0 {
		limit = 4
	}
	components := make([]string, 0, len(images))
	for c := range images {
		components = append(components, c)
	}
	sort.Strings(components)
	var (
		mu      sync.Mutex
		results []Result
		errs    []error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, limit)
	)
	for _, component := range components {
		ref := images[component]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := copyOne(ctx, component, ref, opts, fetch)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", component, ref, err))
				opts.say("FAILED %s: %v", ref, err)
				return
			}
			results = append(results, res)
		}()
	}
	wg.Wait()
	sort.Slice(results, func(i, j int) bool { return results[i].Component < results[j].Component })
	return results, errors.Join(errs...)
}

func copyOne(ctx context.Context, component, ref string, opts Options, fetch func(context.Context, name.Digest) (remote.Taggable, error)) (Result, error) {
	src, tag, err := parse(ref)
	if err != nil {
		return Result{}, err
	}
	dstTag, dstDigest, err := destination(opts.Dest, src, tag)
	if err != nil {
		return Result{}, err
	}
	res := Result{Component: component, Source: ref, Dest: dstTag.String() + "@" + src.DigestStr()}
	if _, err := remote.Head(dstDigest, opts.remote(ctx)...); err == nil {
		opts.say("%s: already in the mirror, verifying", ref)
		return res, verify(ctx, dstDigest, src.DigestStr(), opts)
	}
	if opts.DryRun {
		opts.say("%s: would copy to %s", ref, res.Dest)
		return res, nil
	}
	opts.say("%s: copying to %s", ref, res.Dest)
	obj, err := fetch(ctx, src)
	if err != nil {
		return Result{}, fmt.Errorf("reading the source: %w", err)
	}
	if d, err := obj.(interface{ Digest() (v1.Hash, error) }).Digest(); err != nil || d.String() != src.DigestStr() {
		return Result{}, fmt.Errorf("the source serves %v for %s", d, src.DigestStr())
	}
	switch o := obj.(type) {
	case v1.ImageIndex:
		err = remote.WriteIndex(dstTag, o, opts.remote(ctx)...)
	case v1.Image:
		err = remote.Write(dstTag, o, opts.remote(ctx)...)
	}
	if err != nil {
		return Result{}, fmt.Errorf("writing the mirror: %w", err)
	}
	if err := verify(ctx, dstDigest, src.DigestStr(), opts); err != nil {
		return Result{}, err
	}
	res.Copied = true
	opts.say("%s: mirrored and verified", ref)
	return res, nil
}

// verify reads the copy back in full — the index, every platform's manifest, config and layers —
// and checks every digest.
func verify(ctx context.Context, dst name.Digest, want string, opts Options) error {
	desc, err := remote.Get(dst, opts.remote(ctx)...)
	if err != nil {
		return fmt.Errorf("reading the mirror back: %w", err)
	}
	if desc.Digest.String() != want {
		return fmt.Errorf("the mirror serves digest %s, want %s", desc.Digest, want)
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return err
		}
		if err := validate.Index(idx); err != nil {
			return fmt.Errorf("the mirror's copy does not match its digests: %w", err)
		}
		return nil
	}
	img, err := desc.Image()
	if err != nil {
		return err
	}
	if err := validate.Image(img); err != nil {
		return fmt.Errorf("the mirror's copy does not match its digests: %w", err)
	}
	return nil
}

// Save writes the images into one archive (a tar of an OCI image layout) for sites with no route
// to the source registry.
func Save(ctx context.Context, images map[string]string, archive string, opts Options) error {
	dir, err := os.MkdirTemp("", "mirror-save-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	components := make([]string, 0, len(images))
	for c := range images {
		components = append(components, c)
	}
	sort.Strings(components)
	for _, component := range components {
		ref := images[component]
		src, _, err := parse(ref)
		if err != nil {
			return fmt.Errorf("%s: %w", component, err)
		}
		opts.say("%s: saving", ref)
		idx, err := remote.Index(src, opts.remote(ctx)...)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", component, ref, err)
		}
		if err := validate.Index(idx); err != nil {
			return fmt.Errorf("%s (%s): the source does not match its digests: %w", component, ref, err)
		}
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": ref, "io.cozystack.component": component})); err != nil {
			return err
		}
	}
	return tarDir(dir, archive)
}

// Load pushes everything an archive made by Save holds to opts.Dest, verified like Mirror.
func Load(ctx context.Context, archive string, opts Options) ([]Result, error) {
	dir, err := os.MkdirTemp("", "mirror-load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := untar(archive, dir); err != nil {
		return nil, fmt.Errorf("reading %s: %w", archive, err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	images := map[string]string{}
	byDigest := map[string]v1.Hash{}
	for _, d := range im.Manifests {
		component, ref := d.Annotations["io.cozystack.component"], d.Annotations["org.opencontainers.image.ref.name"]
		if component == "" || ref == "" {
			continue
		}
		images[component] = ref
		byDigest[d.Digest.String()] = d.Digest
	}
	return run(ctx, images, opts, func(_ context.Context, src name.Digest) (remote.Taggable, error) {
		h, ok := byDigest[src.DigestStr()]
		if !ok {
			return nil, fmt.Errorf("%s is not in %s", src, archive)
		}
		return top.ImageIndex(h)
	})
}

// PackageValues renders the Package values that point the packages at the mirror.
func PackageValues(results []Result) string {
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, `---
apiVersion: cozystack.io/v1alpha1
kind: Package
metadata:
  name: cozystack.%[1]s
spec:
  variant: default
  components:
    %[1]s:
      values:
        %[1]s:
          image: %[2]s
`, r.Component, r.Dest)
	}
	return b.String()
}

func tarDir(dir, archive string) error {
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.Clean("/" + h.Name)[1:])
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, tr); err != nil {
			out.Close()
			return err
		}
		out.Close()
	}
}
