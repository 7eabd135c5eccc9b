package images

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WriteLayout writes the index into an OCI image layout directory (created when missing),
// tagged with ref in the layout's org.opencontainers.image.ref.name annotation, and its SBOM
// referrers beside it (each naming its image as subject, as in a registry). Writing again
// replaces the entry of the same ref and the same SBOMs instead of adding copies, so a layout
// built twice lists each image once.
func WriteLayout(dir, ref string, b *Built) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return err
		}
	}
	const refName = "org.opencontainers.image.ref.name"
	if err := p.ReplaceIndex(b.Index, match.Annotation(refName, ref), layout.WithAnnotations(map[string]string{refName: ref})); err != nil {
		return err
	}
	for _, s := range b.SBOMs {
		d, err := s.Digest()
		if err != nil {
			return err
		}
		if err := p.ReplaceImage(s, match.Digests(d)); err != nil {
			return err
		}
	}
	return nil
}

// Push writes the index and its SBOM referrers to a registry (credentials from the Docker
// config) and returns the digest reference of the index.
func Push(ref string, b *Built, opts ...remote.Option) (string, error) {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(tag, b.Index, opts...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	for _, s := range b.SBOMs {
		d, err := s.Digest()
		if err != nil {
			return "", err
		}
		if err := remote.Write(tag.Context().Digest(d.String()), s, opts...); err != nil {
			return "", fmt.Errorf("pushing the SBOM of %s: %w", ref, err)
		}
	}
	d, err := b.Index.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Name() + ":" + tag.Identifier() + "@" + d.String(), nil
}

// Subjects returns, per SBOM, the digest of the image it describes.
func (b *Built) Subjects() ([]v1.Hash, error) {
	var out []v1.Hash
	for _, s := range b.SBOMs {
		m, err := s.Manifest()
		if err != nil {
			return nil, err
		}
		out = append(out, m.Subject.Digest)
	}
	return out, nil
}
