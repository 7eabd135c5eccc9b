package mirror

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Platform is one platform image of an image: its digest reference and its os/arch.
type Platform struct {
	Ref      string // repository@sha256:...
	Platform string // os/arch[/variant]; empty for an image that is not an index
}

// Platforms reads the image at ref (a digest reference; a tag beside the digest is ignored) and
// returns the digest reference of each of its platform images, or the image itself when it is a
// single-platform image. The release signs the index recursively but attests each platform
// image's SBOM, so a verifier needs these digests; after mirroring they are read from the mirror.
func Platforms(ctx context.Context, ref string, a Access) ([]Platform, error) {
	s, err := newSession(a)
	if err != nil {
		return nil, err
	}
	d, err := s.parseDigest(ref)
	if err != nil {
		return nil, fmt.Errorf("%s: want a digest reference (repository@sha256:...): %w", ref, err)
	}
	desc, err := remote.Get(d, s.remote(ctx, d.Registry)...)
	if err != nil {
		return nil, s.explain(d.RegistryStr(), err)
	}
	if !desc.MediaType.IsIndex() {
		return []Platform{{Ref: d.Context().Digest(desc.Digest.String()).String()}}, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Platform
	for _, c := range m.Manifests {
		p := Platform{Ref: d.Context().Digest(c.Digest.String()).String()}
		if c.Platform != nil {
			if c.Platform.OS == "unknown" {
				continue // an attestation manifest some builders put in the index, not an image
			}
			p.Platform = c.Platform.OS + "/" + c.Platform.Architecture
			if c.Platform.Variant != "" {
				p.Platform += "/" + c.Platform.Variant
			}
		}
		out = append(out, p)
	}
	return out, nil
}
