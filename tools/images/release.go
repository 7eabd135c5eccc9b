package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// The media types of a Flux OCI artifact (what `flux push artifact` writes and Flux's
// OCIRepository reads): Cozystack's PackageSources point at such an artifact of the packages
// tree, and ours at our own.
const (
	FluxConfigMediaType  types.MediaType = "application/vnd.cncf.flux.config.v1+json"
	FluxContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
	// PackagesArtifact is the repository name of our packages artifact under the release registry.
	PackagesArtifact = "reserved-ips-packages"
)

// PackagesTarball is packages/ as a reproducible gzipped tar (sorted, no owners, fixed times), the
// content of the packages artifact: paths are relative to packages/, as a PackageSource's
// component paths (system/address-controller) are.
func PackagesTarball(root string) ([]byte, error) {
	dir := filepath.Join(root, "packages")
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(dir, f)
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0).UTC(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PushPackages pushes packages/ as a Flux OCI artifact to <repo>/reserved-ips-packages:<version>
// and returns the pushed reference with its digest.
func PushPackages(root, repo, version, revision string, insecure bool, opts ...remote.Option) (string, error) {
	data, err := PackagesTarball(root)
	if err != nil {
		return "", err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(data, FluxContentMediaType)})
	if err != nil {
		return "", err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, FluxConfigMediaType)
	img = mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.source":   "https://github.com/cozystack/reserved-ips",
		"org.opencontainers.image.revision": version + "@sha1:" + revision,
		"org.opencontainers.image.created":  time.Unix(0, 0).UTC().Format(time.RFC3339),
	}).(v1.Image)
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.NewTag(strings.TrimSuffix(repo, "/")+"/"+PackagesArtifact+":"+version, nopts...)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return ref.String() + "@" + d.String(), nil
}

// ReleaseFiles are what `make release` writes beside the pushed artifacts, for admins who copy
// them into a network of their own: the image list (one digest reference a line, as skopeo sync
// and crane read lists), a hauler manifest of the images and the charts, and the chart list.
type ReleaseFiles struct {
	// Images are the shipped image references (images.yaml).
	Images Shipped
	// Charts are the pushed charts: name → repo/name:version@sha256:... (without oci://).
	Charts map[string]string
	// Packages is the pushed packages artifact reference, if any.
	Packages string
	// Version is the release (v0.1.0); both components carry it.
	Version string
	// MetalLB is the MetalLB version the release is built and tested against.
	MetalLB string
	// UpgradeNotes is the text of the release notes' upgrade section (Markdown).
	UpgradeNotes string
}

// ReleaseNotesFile is the release notes' name in the release directory.
const ReleaseNotesFile = "release-notes.md"

// Write writes images.txt, charts.txt, hauler.yaml and the release notes (ReleaseNotesFile) into dir.
func (r ReleaseFiles) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ReleaseNotesFile), []byte(r.Notes()), 0o644); err != nil {
		return err
	}
	var images, charts []string
	for _, n := range slices.Sorted(maps.Keys(r.Images)) {
		images = append(images, r.Images[n])
	}
	for _, n := range slices.Sorted(maps.Keys(r.Charts)) {
		charts = append(charts, "oci://"+r.Charts[n])
	}
	if r.Packages != "" {
		charts = append(charts, "oci://"+r.Packages)
	}
	if err := os.WriteFile(filepath.Join(dir, "images.txt"), []byte(strings.Join(images, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "charts.txt"), []byte(strings.Join(charts, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	hauler, err := r.haulerManifest()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hauler.yaml"), hauler, 0o644)
}

// Notes are the release notes: the components' version, the MetalLB version the release is
// built and tested against, every image by digest, every chart and the packages artifact by
// digest, and the upgrade notes.
func (r ReleaseFiles) Notes() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# reserved-ips %s\n\n", r.Version)
	b.WriteString("## Components\n\n| component | version | chart version |\n| --- | --- | --- |\n")
	for _, n := range slices.Sorted(maps.Keys(r.Images)) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", n, r.Version, strings.TrimPrefix(r.Version, "v"))
	}
	if r.MetalLB != "" {
		fmt.Fprintf(&b, "\nBuilt and tested against MetalLB %s, the version Cozystack ships.\n", r.MetalLB)
	}
	b.WriteString("\n## Images\n\nEach is a multi-platform index, signed, with an SPDX SBOM attested to every platform image.\n\n")
	for _, n := range slices.Sorted(maps.Keys(r.Images)) {
		fmt.Fprintf(&b, "- %s: `%s`\n", n, r.Images[n])
	}
	b.WriteString("\n## Charts\n\nOCI Helm charts, signed; `helm install NAME oci://REPOSITORY --version VERSION`.\n\n")
	for _, n := range slices.Sorted(maps.Keys(r.Charts)) {
		fmt.Fprintf(&b, "- %s: `oci://%s`\n", n, r.Charts[n])
	}
	if r.Packages != "" {
		fmt.Fprintf(&b, "- packages artifact (deploy/cozystack/reserved-ips.yaml reads it): `oci://%s`\n", r.Packages)
	}
	b.WriteString("\n## Upgrade notes\n\n")
	if notes := strings.TrimSpace(r.UpgradeNotes); notes != "" {
		b.WriteString(notes + "\n")
	} else {
		b.WriteString("None.\n")
	}
	return b.String()
}

// UpgradeNotesFile is the docs file whose "## Next release" section becomes the release notes'
// upgrade notes.
const UpgradeNotesFile = "docs/upgrading.md"

// ReadUpgradeNotes returns the "## Next release" section of docs/upgrading.md, without its
// heading.
func ReadUpgradeNotes(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, UpgradeNotesFile))
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(data), "\n## Next release\n")
	if !ok {
		return "", fmt.Errorf("%s has no \"## Next release\" section", UpgradeNotesFile)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return strings.TrimSpace(rest), nil
}

// haulerManifest is a hauler (Rancher Government's air-gap tool) content manifest: the images
// by digest, and the charts by OCI repository and version.
func (r ReleaseFiles) haulerManifest() ([]byte, error) {
	type item = map[string]any
	var imgs, charts []item
	for _, n := range slices.Sorted(maps.Keys(r.Images)) {
		imgs = append(imgs, item{"name": r.Images[n]})
	}
	for _, n := range slices.Sorted(maps.Keys(r.Charts)) {
		ref, _, _ := strings.Cut(r.Charts[n], "@")
		i := strings.LastIndex(ref, ":")
		repo, version := ref[:i], ref[i+1:]
		charts = append(charts, item{"name": n, "repoURL": "oci://" + repo[:strings.LastIndex(repo, "/")], "version": version})
	}
	var out []byte
	for _, doc := range []item{
		{"apiVersion": "content.hauler.cattle.io/v1", "kind": "Images", "metadata": item{"name": "reserved-ips-images"}, "spec": item{"images": imgs}},
		{"apiVersion": "content.hauler.cattle.io/v1", "kind": "Charts", "metadata": item{"name": "reserved-ips-charts"}, "spec": item{"charts": charts}},
	} {
		data, err := yaml.Marshal(doc)
		if err != nil {
			return nil, err
		}
		out = append(append(out, "---\n"...), data...)
	}
	return out, nil
}

// OutOfTreeFile is the file an operator applies on a running Cozystack to get both components
// before Cozystack carries them: the OCIRepository of our packages artifact, the PackageSources
// (named reserved-ips.*, outside Cozystack's cozystack. prefix) and their Packages.
const OutOfTreeFile = "deploy/cozystack/reserved-ips.yaml"

// PinOutOfTree points the OCIRepository of the out-of-tree file at a pushed packages artifact
// (repo:tag@sha256:...): its url, tag and digest lines.
func PinOutOfTree(root, ref string) error {
	path := filepath.Join(root, OutOfTreeFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	nameTag, digest, ok := strings.Cut(ref, "@")
	i := strings.LastIndex(nameTag, ":")
	if !ok || i < 0 {
		return fmt.Errorf("%q is no repo:tag@digest reference", ref)
	}
	repo, tag := nameTag[:i], nameTag[i+1:]
	text := string(data)
	// Before the first release the reference names a tag alone: the digest goes below it.
	if !regexp.MustCompile(`(?m)^ +digest: `).MatchString(text) {
		text = regexp.MustCompile(`(?m)^( +)(tag: .*)$`).ReplaceAllString(text, "${1}${2}\n${1}digest: ")
	}
	for _, r := range []struct{ key, value string }{{"url", "oci://" + repo}, {"tag", tag}, {"digest", digest}} {
		re := regexp.MustCompile(`(?m)^( +` + r.key + `: ).*$`)
		if len(re.FindAllString(text, -1)) != 1 {
			return fmt.Errorf("%s: want one %q line in the OCIRepository", OutOfTreeFile, r.key)
		}
		text = re.ReplaceAllString(text, "${1}"+escapeRepl(r.value))
	}
	return writeAtomic(path, []byte(text))
}

// PackagesVersionVar is the variable of each packages/system/<name>/Makefile that names the
// release the package carries: the chart version its update target pulls and the source its
// image target builds. `make release` (images publish) writes the release into it before it
// pushes the packages artifact, so the artifact and the tagged commit name their own release.
const PackagesVersionVar = "RESERVED_IPS_VERSION"

var packagesVersionLine = regexp.MustCompile(`(?m)^(` + PackagesVersionVar + ` \?= *)(\S*)[ \t]*$`)

// packageMakefiles lists packages/system/*/Makefile.
func packageMakefiles(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "packages", "system", "*", "Makefile"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no packages/system/*/Makefile under %s", root)
	}
	return files, err
}

// PackagesVersions returns the release each package's Makefile names, by the Makefile's path
// relative to root.
func PackagesVersions(root string) (map[string]string, error) {
	files, err := packageMakefiles(root)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		m := packagesVersionLine.FindAllSubmatch(data, -1)
		if len(m) != 1 {
			return nil, fmt.Errorf("%s: want one %q line, found %d", rel, PackagesVersionVar+" ?= ...", len(m))
		}
		out[filepath.ToSlash(rel)] = string(m[0][2])
	}
	return out, nil
}

// PinPackagesVersion writes version into the PackagesVersionVar line of every package's Makefile.
func PinPackagesVersion(root, version string) error {
	if _, err := PackagesVersions(root); err != nil {
		return err
	}
	files, _ := packageMakefiles(root)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		out := packagesVersionLine.ReplaceAll(data, []byte("${1}"+escapeRepl(version)))
		if string(out) != string(data) {
			if err := writeAtomic(f, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// OutOfTreeVersion returns the release the out-of-tree file installs: the tag of its
// OCIRepository of the packages artifact.
func OutOfTreeVersion(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, OutOfTreeFile))
	if err != nil {
		return "", err
	}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var o struct {
			Kind string `json:"kind"`
			Spec struct {
				Ref struct {
					Tag string `json:"tag"`
				} `json:"ref"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return "", fmt.Errorf("%s: %w", OutOfTreeFile, err)
		}
		if o.Kind == "OCIRepository" && o.Spec.Ref.Tag != "" {
			return o.Spec.Ref.Tag, nil
		}
	}
	return "", fmt.Errorf("%s has no OCIRepository with a tag", OutOfTreeFile)
}

// StalePackagesVersion lists the packages whose Makefile names another release than the one the
// checkout carries (the out-of-tree file's, which `make release` pins with the same version).
func StalePackagesVersion(root string) ([]string, error) {
	want, err := OutOfTreeVersion(root)
	if err != nil {
		return nil, err
	}
	have, err := PackagesVersions(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range slices.Sorted(maps.Keys(have)) {
		if have[f] != want {
			out = append(out, fmt.Sprintf("%s: %s is %s, want %s, the release %s names (make release writes both)", f, PackagesVersionVar, have[f], want, OutOfTreeFile))
		}
	}
	return out, nil
}
