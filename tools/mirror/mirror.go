// Package mirror copies the images the packages ship to a mirror registry by digest, with every
// platform and with what is attached to them (signatures, attestations, SBOMs: OCI referrers
// and cosign's tag scheme), and proves the copy by reading it back: for air-gapped and mirrored
// installs. Without any route it saves everything into one archive (an OCI image layout in a
// tar, with a checksum file) and loads it on the other side.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/images"
)

// Options configures a mirror run.
type Options struct {
	// Dest is the registry and path prefix images are copied under (mirror.example.org/cozystack).
	Dest string
	// KeepPath keeps the source repository path under Dest (ghcr.io/cozystack/x →
	// Dest/cozystack/x) instead of only its last element (Dest/x).
	KeepPath bool
	// NoReferrers copies the images alone, without their signatures, attestations and SBOMs.
	NoReferrers bool
	// DryRun says what would be copied, and copies nothing.
	DryRun bool
	// Concurrency is how many images are copied at once (4 when zero).
	Concurrency int
	// Progress receives one line per step.
	Progress io.Writer
	// Access says how to reach the registries (TLS, plain HTTP, credentials, retries).
	Access Access
	// Charts are the OCI Helm charts (and other OCI artifacts, such as the packages artifact)
	// carried with the images: name → [oci://]repository:version[@sha256:...]. A reference
	// without a digest is resolved to one at the source, once; from there on it is copied by
	// digest like an image, with its signatures. A chart under .../charts/<name> goes to
	// Dest/charts/<name> (the layout `make release` publishes and the packages' update targets
	// pull from), anything else to Dest/<name>; KeepPath keeps the whole source path.
	Charts map[string]string
}

// Result is one image's outcome.
type Result struct {
	// Component is the Package component the image belongs to (address-controller, ...).
	Component string
	// Source and Dest are digest references.
	Source, Dest string
	// Copied is false when the destination already had the image (or on a dry run).
	Copied bool
	// Attachments are the signatures, attestations and SBOMs found for the image (its index and
	// every platform manifest), by digest in the mirror, each verified there.
	Attachments []string
	// Chart is true for a chart (Options.Charts); Component is then the chart's name.
	Chart bool
}

// item is one thing to copy: an image of a component, or a chart.
type item struct {
	component, ref string
	chart          bool
}

func (i item) String() string {
	if i.chart {
		return "chart " + i.component
	}
	return i.component
}

// items lists the images and the charts, sorted: images first, each kind by name.
func items(images, charts map[string]string) []item {
	var out []item
	for _, c := range sortedKeys(images) {
		out = append(out, item{component: c, ref: images[c]})
	}
	for _, c := range sortedKeys(charts) {
		out = append(out, item{component: c, ref: charts[c], chart: true})
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// resolveCharts turns each chart reference into a digest reference (repository:version@sha256:...),
// asking the source registry for the digest of a reference that names none.
func resolveCharts(ctx context.Context, s *session, charts map[string]string) (map[string]string, []error) {
	out := map[string]string{}
	var errs []error
	for _, n := range sortedKeys(charts) {
		ref := strings.TrimPrefix(charts[n], "oci://")
		if strings.Contains(ref, "@") {
			out[n] = ref
			continue
		}
		tag, err := name.NewTag(ref, name.StrictValidation)
		if err != nil {
			errs = append(errs, fmt.Errorf("chart %s (%s): want repository:version[@sha256:...]: %w", n, ref, err))
			continue
		}
		tag, err = s.parseTag(tag.String())
		if err != nil {
			errs = append(errs, fmt.Errorf("chart %s (%s): %w", n, ref, err))
			continue
		}
		desc, err := remote.Head(tag, s.remote(ctx, tag.Registry)...)
		if err != nil {
			errs = append(errs, fmt.Errorf("chart %s (%s): %w", n, ref, s.explain(tag.RegistryStr(), err)))
			continue
		}
		out[n] = ref + "@" + desc.Digest.String()
	}
	return out, errs
}

// PackageImages reads the image references the packages ship: <component>.image in each
// packages/system/<component>/values.yaml, a reference or an image map (registry, repository, tag,
// digest).
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
			if img := images.ImageRef(v["image"]); img != "" {
				out[component] = img
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no image values found under %s", packagesDir)
	}
	return out, nil
}

func (o Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// destination maps a source digest reference to the mirror: the repository's last element (or
// its whole path with keepPath) under dest, the same tag, the same digest. A chart published
// under .../charts/<name> keeps its charts/ element.
func destination(s *session, dest string, src name.Digest, tag string, keepPath, chart bool) (name.Tag, name.Digest, error) {
	repo := src.Context().RepositoryStr()
	if !keepPath {
		parts := strings.Split(repo, "/")
		repo = parts[len(parts)-1]
		if chart && len(parts) > 1 && parts[len(parts)-2] == "charts" {
			repo = "charts/" + repo
		}
	}
	r, err := s.parseRepo(strings.TrimSuffix(dest, "/") + "/" + repo)
	if err != nil {
		return name.Tag{}, name.Digest{}, fmt.Errorf("destination %q: %w", dest, err)
	}
	return r.Tag(tag), r.Digest(src.DigestStr()), nil
}

// DefaultTag is the tag of a copy whose source reference names no tag.
const DefaultTag = "mirrored"

// parse insists on a digest reference and returns it with its tag: the source's own tag
// (latest included), or DefaultTag when the reference names none.
func parse(s *session, ref string) (name.Digest, string, error) {
	at := strings.Index(ref, "@")
	if at < 0 {
		return name.Digest{}, "", fmt.Errorf("%s is not a digest reference (name[:tag]@sha256:...): mirrors copy by digest", ref)
	}
	d, err := s.parseDigest(ref)
	if err != nil {
		return name.Digest{}, "", fmt.Errorf("%s: %w", ref, err)
	}
	tag := DefaultTag
	if t, err := name.NewTag(ref[:at], name.StrictValidation); err == nil {
		tag = t.TagStr()
	}
	return d, tag, nil
}

// artifact is an image or an index.
type artifact interface {
	remote.Taggable
	Digest() (v1.Hash, error)
}

// attachment is something that refers to an image: an OCI referrer (Tag empty) or a manifest
// under cosign's tag scheme (sha256-<hex>.sig, .att, .sbom).
type attachment struct {
	Subject v1.Hash
	Digest  v1.Hash
	Tag     string
}

// source is where images are copied from: a registry, or an archive.
type source interface {
	get(ctx context.Context, d name.Digest) (artifact, error)
	attachments(ctx context.Context, repo name.Repository, subjects []v1.Hash) ([]attachment, error)
}

// cosignSuffixes are the tags cosign (and tools that follow it) attach to sha256-<hex>.
var cosignSuffixes = []string{"sig", "att", "sbom"}

func cosignTag(subject v1.Hash, suffix string) string {
	return subject.Algorithm + "-" + subject.Hex + "." + suffix
}

type remoteSource struct{ s *session }

func (r remoteSource) get(ctx context.Context, d name.Digest) (artifact, error) {
	desc, err := remote.Get(d, r.s.remote(ctx, d.Registry)...)
	if err != nil {
		return nil, r.s.explain(d.RegistryStr(), err)
	}
	if desc.MediaType.IsIndex() {
		return desc.ImageIndex()
	}
	return desc.Image()
}

func (r remoteSource) attachments(ctx context.Context, repo name.Repository, subjects []v1.Hash) ([]attachment, error) {
	var out []attachment
	for _, subj := range subjects {
		idx, err := remote.Referrers(repo.Digest(subj.String()), r.s.remote(ctx, repo.Registry)...)
		if err != nil {
			return nil, fmt.Errorf("listing the referrers of %s: %w", subj, r.s.explain(repo.RegistryStr(), err))
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range m.Manifests {
			out = append(out, attachment{Subject: subj, Digest: d.Digest})
		}
		for _, suffix := range cosignSuffixes {
			tag := repo.Tag(cosignTag(subj, suffix))
			desc, err := remote.Head(tag, r.s.remote(ctx, repo.Registry)...)
			var te *transport.Error
			if errors.As(err, &te) && te.StatusCode == 404 {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("looking for %s: %w", tag, r.s.explain(repo.RegistryStr(), err))
			}
			out = append(out, attachment{Subject: subj, Digest: desc.Digest, Tag: tag.TagStr()})
		}
	}
	return out, nil
}

// subjects are the digests attachments may refer to: the image, and each platform's manifest.
func subjects(obj artifact) ([]v1.Hash, error) {
	d, err := obj.Digest()
	if err != nil {
		return nil, err
	}
	out := []v1.Hash{d}
	if idx, ok := obj.(v1.ImageIndex); ok {
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, c := range m.Manifests {
			out = append(out, c.Digest)
		}
	}
	return out, nil
}

// Mirror copies each image (component → digest reference) to opts.Dest, every platform, with
// its attachments unless opts.NoReferrers, skips what the destination already has, then reads
// the destination back and fails on any digest mismatch. The verified images are returned even
// when others failed; the failures are joined in the error, each naming its image.
func Mirror(ctx context.Context, images map[string]string, opts Options) ([]Result, error) {
	s, err := newSession(opts.Access)
	if err != nil {
		return nil, err
	}
	charts, errs := resolveCharts(ctx, s, opts.Charts)
	res, err := run(ctx, s, items(images, charts), opts, remoteSource{s})
	return res, errors.Join(append(errs, err)...)
}

func run(ctx context.Context, s *session, todo []item, opts Options, src source) ([]Result, error) {
	limit := opts.Concurrency
	if limit <= 0 {
		limit = 4
	}
	var (
		mu      sync.Mutex
		results []Result
		errs    []error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, limit)
	)
	for _, it := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := copyOne(ctx, s, it, opts, src)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", it, it.ref, err))
				opts.say("FAILED %s: %v", it.ref, err)
				return
			}
			results = append(results, res)
		}()
	}
	wg.Wait()
	sort.Slice(results, func(i, j int) bool {
		if results[i].Chart != results[j].Chart {
			return !results[i].Chart
		}
		return results[i].Component < results[j].Component
	})
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return results, errors.Join(errs...)
}

func copyOne(ctx context.Context, s *session, it item, opts Options, src source) (Result, error) {
	ref := it.ref
	from, tag, err := parse(s, ref)
	if err != nil {
		return Result{}, err
	}
	dstTag, dstDigest, err := destination(s, opts.Dest, from, tag, opts.KeepPath, it.chart)
	if err != nil {
		return Result{}, err
	}
	res := Result{Component: it.component, Source: ref, Dest: dstTag.String() + "@" + from.DigestStr(), Chart: it.chart}
	// A chart is no image (its config is Helm's, its layer the chart's tarball): it is checked
	// blob by blob against its digests.
	verify := verifyImage
	if it.chart {
		verify = func(ctx context.Context, s *session, dst name.Digest, _ string) error {
			return verifyDigests(ctx, s, dst)
		}
	}
	obj, err := src.get(ctx, from)
	if err != nil {
		return Result{}, fmt.Errorf("reading the source: %w", err)
	}
	if d, err := obj.Digest(); err != nil || d.String() != from.DigestStr() {
		return Result{}, fmt.Errorf("the source serves %v for %s", d, from.DigestStr())
	}
	_, headErr := remote.Head(dstDigest, s.remote(ctx, dstDigest.Registry)...)
	var te *transport.Error
	switch {
	case headErr == nil:
		opts.say("%s: already in the mirror, verifying", ref)
		if err := verify(ctx, s, dstDigest, from.DigestStr()); err != nil {
			return Result{}, err
		}
	case errors.As(headErr, &te) && te.StatusCode == 404:
		if opts.DryRun {
			opts.say("%s: would copy to %s", ref, res.Dest)
			break
		}
		opts.say("%s: copying to %s", ref, res.Dest)
		if err := write(ctx, s, dstTag, obj); err != nil {
			return Result{}, err
		}
		if err := verify(ctx, s, dstDigest, from.DigestStr()); err != nil {
			return Result{}, err
		}
		res.Copied = true
		opts.say("%s: mirrored and verified", ref)
	default:
		return Result{}, fmt.Errorf("checking the mirror: %w", s.explain(dstDigest.RegistryStr(), headErr))
	}
	if opts.NoReferrers {
		return res, nil
	}
	subj, err := subjects(obj)
	if err != nil {
		return Result{}, err
	}
	atts, err := src.attachments(ctx, from.Context(), subj)
	if err != nil {
		return Result{}, err
	}
	for _, a := range atts {
		dest, err := copyAttachment(ctx, s, from.Context(), dstDigest.Context(), a, opts, src)
		if err != nil {
			return Result{}, fmt.Errorf("attachment %s of %s: %w", a.Digest, a.Subject, err)
		}
		res.Attachments = append(res.Attachments, dest)
	}
	if len(atts) > 0 && !opts.DryRun {
		opts.say("%s: %d signatures, attestations and SBOMs copied and verified", ref, len(atts))
	}
	return res, nil
}

// copyAttachment copies one attachment by digest (and under its cosign tag), then proves it:
// the digest reads back intact, the tag names it, and a referrer is listed for its subject.
func copyAttachment(ctx context.Context, s *session, fromRepo, toRepo name.Repository, a attachment, opts Options, src source) (string, error) {
	dst := toRepo.Digest(a.Digest.String())
	if opts.DryRun {
		opts.say("  would copy %s (refers to %s)", a.Digest, a.Subject)
		return dst.String(), nil
	}
	if _, err := remote.Head(dst, s.remote(ctx, toRepo.Registry)...); err != nil {
		obj, err := src.get(ctx, fromRepo.Digest(a.Digest.String()))
		if err != nil {
			return "", err
		}
		var target name.Reference = dst
		if a.Tag != "" {
			target = toRepo.Tag(a.Tag)
		}
		if err := write(ctx, s, target, obj); err != nil {
			return "", err
		}
	} else if a.Tag != "" {
		// The manifest is there; make sure the tag is too.
		obj, err := src.get(ctx, fromRepo.Digest(a.Digest.String()))
		if err != nil {
			return "", err
		}
		if err := write(ctx, s, toRepo.Tag(a.Tag), obj); err != nil {
			return "", err
		}
	}
	if err := verifyDigests(ctx, s, dst); err != nil {
		return "", err
	}
	if a.Tag != "" {
		desc, err := remote.Head(toRepo.Tag(a.Tag), s.remote(ctx, toRepo.Registry)...)
		if err != nil {
			return "", s.explain(toRepo.RegistryStr(), err)
		}
		if desc.Digest != a.Digest {
			return "", fmt.Errorf("the mirror's tag %s names %s, want %s", a.Tag, desc.Digest, a.Digest)
		}
		return toRepo.Tag(a.Tag).String() + "@" + a.Digest.String(), nil
	}
	idx, err := remote.Referrers(toRepo.Digest(a.Subject.String()), s.remote(ctx, toRepo.Registry)...)
	if err != nil {
		return "", fmt.Errorf("listing the mirror's referrers: %w", s.explain(toRepo.RegistryStr(), err))
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	for _, d := range m.Manifests {
		if d.Digest == a.Digest {
			return dst.String(), nil
		}
	}
	return "", fmt.Errorf("the mirror does not list %s among the referrers of %s", a.Digest, a.Subject)
}

func write(ctx context.Context, s *session, ref name.Reference, obj artifact) error {
	var err error
	switch o := obj.(type) {
	case v1.ImageIndex:
		err = remote.WriteIndex(ref, o, s.remote(ctx, ref.Context().Registry)...)
	case v1.Image:
		err = remote.Write(ref, o, s.remote(ctx, ref.Context().Registry)...)
	default:
		err = fmt.Errorf("%T is neither an image nor an index", obj)
	}
	if err != nil {
		return fmt.Errorf("writing the mirror: %w", s.explain(ref.Context().RegistryStr(), err))
	}
	return nil
}

// verifyImage reads the copy back in full — the index, every platform's manifest, config and
// layers — and checks every digest.
func verifyImage(ctx context.Context, s *session, dst name.Digest, want string) error {
	desc, err := remote.Get(dst, s.remote(ctx, dst.Registry)...)
	if err != nil {
		return fmt.Errorf("reading the mirror back: %w", s.explain(dst.RegistryStr(), err))
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

// verifyDigests reads an artifact back by digest and hashes its manifest and every blob it
// names (artifacts need not carry an image config, so validate.Image does not apply).
func verifyDigests(ctx context.Context, s *session, dst name.Digest) error {
	desc, err := remote.Get(dst, s.remote(ctx, dst.Registry)...)
	if err != nil {
		return fmt.Errorf("reading the mirror back: %w", s.explain(dst.RegistryStr(), err))
	}
	if desc.Digest.String() != dst.DigestStr() {
		return fmt.Errorf("the mirror serves digest %s, want %s", desc.Digest, dst.DigestStr())
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return err
		}
		return validate.Index(idx, validate.Fast)
	}
	img, err := desc.Image()
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	for _, l := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if l.Data != nil && int64(len(l.Data)) == l.Size {
			continue // inlined (the OCI empty config)
		}
		blob, err := remote.Layer(dst.Context().Digest(l.Digest.String()), s.remote(ctx, dst.Registry)...)
		if err != nil {
			return err
		}
		rc, err := blob.Compressed()
		if err != nil {
			return fmt.Errorf("reading blob %s back: %w", l.Digest, s.explain(dst.RegistryStr(), err))
		}
		h, n, err := v1.SHA256(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("reading blob %s back: %w", l.Digest, err)
		}
		if h != l.Digest || n != l.Size {
			return fmt.Errorf("the mirror's blob %s hashes to %s (%d bytes)", l.Digest, h, n)
		}
	}
	return nil
}

// Package names: the install the printed Packages are for. PrefixOutOfTree is the install of
// deploy/cozystack/reserved-ips.yaml (Packages reserved-ips.<component>), PrefixInTree
// Cozystack's own packages (cozystack.<component>, packages/core/platform/sources).
const (
	PrefixOutOfTree = "reserved-ips"
	PrefixInTree    = "cozystack"
)

// PackagePrefixes are the prefixes PackageValues takes.
var PackagePrefixes = []string{PrefixOutOfTree, PrefixInTree}

// outOfTreeValues are the values the Packages of deploy/cozystack/reserved-ips.yaml set besides
// the image (TestPackageValuesAreTheInstallsPackages holds them equal), printed with the image
// so that applying the printed file over the installed one keeps them: kubectl apply deletes a
// value that the last applied file set and the new one leaves out.
const outOfTreeValues = `          metrics:
            grafanaDashboard:
              enabled: true
`

// PackageValues renders the Packages that point the packages at the mirror, named
// <prefix>.<component>: PrefixOutOfTree (with the other values the out-of-tree file sets) or
// PrefixInTree (the image alone).
func PackageValues(results []Result, prefix string) (string, error) {
	extra := ""
	switch prefix {
	case PrefixOutOfTree:
		extra = outOfTreeValues
	case PrefixInTree:
	default:
		return "", fmt.Errorf("package prefix %q: want %s", prefix, strings.Join(PackagePrefixes, " or "))
	}
	var b strings.Builder
	for _, r := range results {
		if r.Chart {
			continue
		}
		fmt.Fprintf(&b, `---
apiVersion: cozystack.io/v1alpha1
kind: Package
metadata:
  name: %[3]s.%[1]s
spec:
  variant: default
  components:
    %[1]s:
      values:
        %[1]s:
          image: %[2]s
%[4]s`, r.Component, r.Dest, prefix, extra)
	}
	return b.String(), nil
}
