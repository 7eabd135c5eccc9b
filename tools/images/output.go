package images

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WriteLayout writes the index into an OCI image layout directory (created when missing),
// tagged with ref in the layout's org.opencontainers.image.ref.name annotation.
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return err
		}
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref}))
}

// Push writes the index to a registry (credentials from the Docker config) and returns the
// digest reference.
func Push(ref string, idx v1.ImageIndex, opts ...remote.Option) (string, error) {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Name() + ":" + tag.Identifier() + "@" + d.String(), nil
}
