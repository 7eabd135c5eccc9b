package mirror

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Annotations of the archive's OCI layout index (index.json), beside the standard
// org.opencontainers.image.ref.name that crane, skopeo and oras read.
const (
	// AnnotationComponent names the Package component an image (or attachment) belongs to.
	AnnotationComponent = "io.cozystack.mirror.component"
	// AnnotationSubject marks an attachment and names the digest it refers to.
	AnnotationSubject = "io.cozystack.mirror.subject"
	// AnnotationTag is the cosign-scheme tag of an attachment (empty for an OCI referrer).
	AnnotationTag = "io.cozystack.mirror.tag"
	// AnnotationKind is "chart" for a chart (Options.Charts; its AnnotationComponent is the
	// chart's name), absent for an image.
	AnnotationKind = "io.cozystack.mirror.kind"
	refName        = "org.opencontainers.image.ref.name"
)

// ChecksumFile is the file Save writes beside the archive: "<sha256 hex>  <archive name>",
// as sha256sum prints it (so `sha256sum -c` checks it too).
func ChecksumFile(archive string) string { return archive + ".sha256" }

// Save writes the images, every platform, the charts of opts.Charts, and (unless
// opts.NoReferrers) their attachments into one archive: a tar of an OCI image layout. The archive is written to a temporary file and
// renamed into place only when complete, then its checksum file is written. Images that cannot
// be read are listed in the error; the others are saved, and returned.
func Save(ctx context.Context, images map[string]string, archive string, opts Options) ([]Result, error) {
	s, err := newSession(opts.Access)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mirror-save-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	src := remoteSource{s}
	charts, errs := resolveCharts(ctx, s, opts.Charts)
	var results []Result
	for _, it := range items(images, charts) {
		res, err := saveOne(ctx, p, src, s, it, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", it, it.ref, err))
			opts.say("FAILED %s: %v", it.ref, err)
			continue
		}
		results = append(results, res)
	}
	if len(results) == 0 {
		return nil, errors.Join(append(errs, fmt.Errorf("nothing to save: no archive written"))...)
	}
	if err := writeArchive(dir, archive); err != nil {
		return results, errors.Join(append(errs, err)...)
	}
	return results, errors.Join(errs...)
}

func saveOne(ctx context.Context, p layout.Path, src remoteSource, s *session, it item, opts Options) (Result, error) {
	component, ref := it.component, it.ref
	d, _, err := parse(s, ref)
	if err != nil {
		return Result{}, err
	}
	opts.say("%s: saving", ref)
	obj, err := src.get(ctx, d)
	if err != nil {
		return Result{}, err
	}
	if got, err := obj.Digest(); err != nil || got.String() != d.DigestStr() {
		return Result{}, fmt.Errorf("the source serves %v for %s", got, d.DigestStr())
	}
	if err := validateArtifact(obj, it.chart); err != nil {
		return Result{}, fmt.Errorf("the source does not match its digests: %w", err)
	}
	var atts []attachment
	if !opts.NoReferrers {
		subj, err := subjects(obj)
		if err != nil {
			return Result{}, err
		}
		if atts, err = src.attachments(ctx, d.Context(), subj); err != nil {
			return Result{}, err
		}
	}
	ann := map[string]string{refName: ref, AnnotationComponent: component}
	if it.chart {
		ann[AnnotationKind] = "chart"
	}
	if err := appendArtifact(p, obj, ann); err != nil {
		return Result{}, err
	}
	res := Result{Component: component, Source: ref, Dest: ref, Copied: true, Chart: it.chart}
	for _, a := range atts {
		att, err := src.get(ctx, d.Context().Digest(a.Digest.String()))
		if err != nil {
			return Result{}, fmt.Errorf("attachment %s: %w", a.Digest, err)
		}
		ann := map[string]string{AnnotationComponent: component, AnnotationSubject: a.Subject.String()}
		if a.Tag != "" {
			ann[AnnotationTag] = a.Tag
		}
		if err := appendArtifact(p, att, ann); err != nil {
			return Result{}, err
		}
		res.Attachments = append(res.Attachments, a.Digest.String())
	}
	return res, nil
}

// validateArtifact checks an image (or index) against its digests, or a chart blob by blob (its
// config is Helm's, not an image's).
func validateArtifact(obj artifact, chart bool) error {
	switch o := obj.(type) {
	case v1.ImageIndex:
		return validate.Index(o)
	case v1.Image:
		if chart {
			return validateBlobs(o)
		}
		return validate.Image(o)
	}
	return nil
}

func validateBlobs(img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	for _, l := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		var rc io.ReadCloser
		if l.Digest == m.Config.Digest {
			raw, err := img.RawConfigFile()
			if err != nil {
				return err
			}
			rc = io.NopCloser(strings.NewReader(string(raw)))
		} else {
			layer, err := img.LayerByDigest(l.Digest)
			if err != nil {
				return err
			}
			if rc, err = layer.Compressed(); err != nil {
				return err
			}
		}
		h, n, err := v1.SHA256(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if h != l.Digest || n != l.Size {
			return fmt.Errorf("blob %s hashes to %s (%d bytes)", l.Digest, h, n)
		}
	}
	return nil
}

func appendArtifact(p layout.Path, obj artifact, ann map[string]string) error {
	switch o := obj.(type) {
	case v1.ImageIndex:
		return p.AppendIndex(o, layout.WithAnnotations(ann))
	case v1.Image:
		return p.AppendImage(o, layout.WithAnnotations(ann))
	}
	return fmt.Errorf("%T is neither an image nor an index", obj)
}

// writeArchive tars dir into a temporary file beside archive, syncs it, renames it into place
// and writes the checksum file the same way.
func writeArchive(dir, archive string) error {
	tmp, err := os.CreateTemp(filepath.Dir(archive), "."+filepath.Base(archive)+".partial-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(tmp, h))
	var files []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		tmp.Close()
		return err
	}
	sort.Strings(files)
	for _, path := range files {
		if err := addFile(tw, dir, path); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), archive); err != nil {
		return err
	}
	sum := hex.EncodeToString(h.Sum(nil)) + "  " + filepath.Base(archive) + "\n"
	ctmp := ChecksumFile(archive) + ".partial"
	if err := os.WriteFile(ctmp, []byte(sum), 0o644); err != nil {
		return err
	}
	return os.Rename(ctmp, ChecksumFile(archive))
}

func addFile(tw *tar.Writer, dir, path string) error {
	rel, _ := filepath.Rel(dir, path)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: info.Size(), Typeflag: tar.TypeReg,
		Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// VerifyArchive checks an archive against its checksum file and unpacks it into dir, refusing a
// missing checksum, a mismatch, a truncated tar, and any blob whose content does not hash to
// its name.
func VerifyArchive(archive, dir string) error {
	sumData, err := os.ReadFile(ChecksumFile(archive))
	if err != nil {
		return fmt.Errorf("no checksum file %s beside the archive (carry it with the archive): %w", ChecksumFile(archive), err)
	}
	fields := strings.Fields(string(sumData))
	if len(fields) == 0 || len(fields[0]) != 64 {
		return fmt.Errorf("%s is not a sha256 checksum file", ChecksumFile(archive))
	}
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != fields[0] {
		return fmt.Errorf("archive %s is truncated or altered: its sha256 is %s, the checksum file says %s", archive, got, fields[0])
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("archive %s is truncated: %w", archive, err)
		}
		if err != nil {
			return fmt.Errorf("archive %s is damaged or not a tar: %w", archive, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		target := filepath.Join(dir, filepath.Clean("/" + hdr.Name)[1:])
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		out.Close()
		if err != nil {
			return fmt.Errorf("archive %s is truncated: %w", archive, err)
		}
	}
	for _, f := range []string{"oci-layout", "index.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("archive %s is truncated: it holds no %s", archive, f)
		}
	}
	// Every blob is content-addressed: check each against its name.
	blobs := filepath.Join(dir, "blobs", "sha256")
	entries, err := os.ReadDir(blobs)
	if err != nil {
		return fmt.Errorf("archive %s holds no OCI layout: %w", archive, err)
	}
	for _, e := range entries {
		data, err := os.Open(filepath.Join(blobs, e.Name()))
		if err != nil {
			return err
		}
		got, _, err := v1.SHA256(data)
		data.Close()
		if err != nil {
			return err
		}
		if got.Hex != e.Name() {
			return fmt.Errorf("archive %s: blob %s holds content hashing to %s", archive, e.Name(), got.Hex)
		}
	}
	// And every blob the index reaches is there.
	p, err := layout.FromPath(dir)
	if err != nil {
		return fmt.Errorf("archive %s: %w", archive, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return fmt.Errorf("archive %s: %w", archive, err)
	}
	if err := reachable(p, top); err != nil {
		return fmt.Errorf("archive %s is truncated: %w", archive, err)
	}
	return nil
}

// reachable checks that every manifest and blob the index names is in the layout.
func reachable(p layout.Path, idx v1.ImageIndex) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	has := func(h v1.Hash) error {
		if _, err := os.Stat(filepath.Join(string(p), "blobs", h.Algorithm, h.Hex)); err != nil {
			return fmt.Errorf("blob %s is missing", h)
		}
		return nil
	}
	for _, d := range m.Manifests {
		if err := has(d.Digest); err != nil {
			return err
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			if err := reachable(p, child); err != nil {
				return err
			}
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		im, err := img.Manifest()
		if err != nil {
			return err
		}
		for _, b := range append([]v1.Descriptor{im.Config}, im.Layers...) {
			if b.Data != nil {
				continue
			}
			if err := has(b.Digest); err != nil {
				return err
			}
		}
	}
	return nil
}

// layoutSource serves what an archive holds.
type layoutSource struct {
	top     v1.ImageIndex
	byDig   map[v1.Hash]v1.Descriptor
	atts    map[v1.Hash][]attachment // by subject
	archive string
}

func (l layoutSource) get(_ context.Context, d name.Digest) (artifact, error) {
	h, err := v1.NewHash(d.DigestStr())
	if err != nil {
		return nil, err
	}
	desc, ok := l.byDig[h]
	if !ok {
		return nil, fmt.Errorf("%s is not in %s", d.DigestStr(), l.archive)
	}
	if desc.MediaType.IsIndex() {
		return l.top.ImageIndex(h)
	}
	return l.top.Image(h)
}

func (l layoutSource) attachments(_ context.Context, _ name.Repository, subjects []v1.Hash) ([]attachment, error) {
	var out []attachment
	for _, s := range subjects {
		out = append(out, l.atts[s]...)
	}
	return out, nil
}

// Load verifies an archive made by Save (see VerifyArchive) and pushes everything it holds to
// opts.Dest, verified like Mirror.
func Load(ctx context.Context, archive string, opts Options) ([]Result, error) {
	s, err := newSession(opts.Access)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mirror-load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := VerifyArchive(archive, dir); err != nil {
		return nil, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", archive, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", archive, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", archive, err)
	}
	src := layoutSource{top: top, byDig: map[v1.Hash]v1.Descriptor{}, atts: map[v1.Hash][]attachment{}, archive: archive}
	var todo []item
	for _, d := range im.Manifests {
		src.byDig[d.Digest] = d
		component := d.Annotations[AnnotationComponent]
		if subj := d.Annotations[AnnotationSubject]; subj != "" {
			h, err := v1.NewHash(subj)
			if err != nil {
				return nil, fmt.Errorf("archive %s: %w", archive, err)
			}
			src.atts[h] = append(src.atts[h], attachment{Subject: h, Digest: d.Digest, Tag: d.Annotations[AnnotationTag]})
			continue
		}
		if component != "" && d.Annotations[refName] != "" {
			todo = append(todo, item{component: component, ref: d.Annotations[refName], chart: d.Annotations[AnnotationKind] == "chart"})
		}
	}
	if len(todo) == 0 {
		return nil, fmt.Errorf("archive %s holds no images saved by this tool", archive)
	}
	return run(ctx, s, todo, opts, src)
}
