package mirror

import (
	"context"
	"path/filepath"
	"testing"

	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/content/oci"
)

// The archive is an OCI image layout in a tar that another tool reads as it is: oras-go's
// OCI-layout tar reader resolves each image by the ref name save wrote, copies it out whole
// (checking every blob against its digest), and finds the SBOM referrers through their subject.
func TestArchiveIsReadByOras(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	multi := pushMultiArch(t, src, "address-controller")
	wantMulti := attach(t, multi)
	singleRef := pushSingle(t, src)
	attach(t, singleRef)
	archive := filepath.Join(t.TempDir(), "images.tar")
	res, err := Save(ctx, map[string]string{"address-controller": multi, "metallb-iad": singleRef}, archive, Options{})
	if err != nil || len(res) != 2 {
		t.Fatalf("%+v, %v", res, err)
	}

	store, err := oci.NewFromTar(ctx, archive)
	if err != nil {
		t.Fatalf("oras cannot open the archive: %v", err)
	}
	for _, r := range res {
		desc, err := store.Resolve(ctx, r.Source)
		if err != nil {
			t.Fatalf("oras does not resolve %s: %v", r.Source, err)
		}
		if desc.Digest.String() != digestOf(r.Source) {
			t.Fatalf("oras resolves %s to %s", r.Source, desc.Digest)
		}
		out := memory.New()
		if _, err := oras.Copy(ctx, store, r.Source, out, "copy", oras.DefaultCopyOptions); err != nil {
			t.Fatalf("oras cannot copy %s out of the archive: %v", r.Source, err)
		}
		if r.Component == "address-controller" {
			pred, err := store.Predecessors(ctx, desc)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range pred {
				found = found || p.Digest.String() == wantMulti[0].String()
			}
			if !found {
				t.Fatalf("oras finds no SBOM referrer %s of %s among %v", wantMulti[0], desc.Digest, pred)
			}
		}
	}
}
