package images

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"runtime/debug"
	"strings"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx/v2/common"
	spdx "github.com/spdx/tools-golang/spdx/v2/v2_3"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SBOMArtifactType is the artifact type of the SBOM referrers (SPDX 2.3 in JSON).
const SBOMArtifactType = "application/spdx+json"

// Annotation keys this tool sets besides the OCI ones.
const (
	// AnnotationGoVersion records the Go toolchain that compiled the binary.
	AnnotationGoVersion = "io.cozystack.image.go-version"
)

// SBOM describes a compiled binary as an SPDX 2.3 document, from the module graph the linker
// embedded in it (runtime/debug.BuildInfo): the binary, its main module, every dependency module
// with its go.sum hash and package URL, and the Go standard library of the toolchain. The
// document is a pure function of the binary and opts: same build, same bytes.
func SBOM(bin []byte, imageName string, p v1.Platform, opts Options) ([]byte, error) {
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("reading the build info of %s: %w", imageName, err)
	}
	sum := sha256.Sum256(bin)
	binID := common.ElementID("Binary-" + imageName)
	doc := &spdx.Document{
		SPDXVersion:    spdx.Version,
		DataLicense:    spdx.DataLicense,
		SPDXIdentifier: "DOCUMENT",
		DocumentName:   fmt.Sprintf("%s %s %s/%s", imageName, opts.Version, p.OS, p.Architecture),
		DocumentNamespace: fmt.Sprintf("%s/spdx/%s/%s/%s-%s/%s", strings.TrimSuffix(opts.Source, "/"), imageName,
			opts.Version, p.OS, p.Architecture, hex.EncodeToString(sum[:])),
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{
				{CreatorType: "Tool", Creator: "github.com/cozystack/reserved-ips/tools/images"},
				{CreatorType: "Organization", Creator: "Cozystack"},
			},
			Created: epoch.Format("2006-01-02T15:04:05Z"),
			CreatorComment: fmt.Sprintf("Generated from the build info of the binary at build time; source %s, revision %s, toolchain %s.",
				opts.Source, opts.Revision, bi.GoVersion),
		},
	}
	settings := make([]string, 0, len(bi.Settings))
	for _, s := range bi.Settings {
		settings = append(settings, s.Key+"="+s.Value)
	}
	binary := &spdx.Package{
		PackageName:             "/usr/local/bin/" + imageName,
		PackageSPDXIdentifier:   binID,
		PackageVersion:          opts.Version,
		PackageFileName:         "usr/local/bin/" + imageName,
		PackageDownloadLocation: "NOASSERTION",
		PackageChecksums:        []common.Checksum{{Algorithm: common.SHA256, Value: hex.EncodeToString(sum[:])}},
		PackageSupplier:         &common.Supplier{SupplierType: "Organization", Supplier: "Cozystack"},
		PackageLicenseConcluded: "NOASSERTION",
		PackageLicenseDeclared:  "NOASSERTION",
		PackageCopyrightText:    "NOASSERTION",
		PrimaryPackagePurpose:   "APPLICATION",
		PackageComment: fmt.Sprintf("%s/%s, %s, build settings: %s", p.OS, p.Architecture, bi.GoVersion,
			strings.Join(settings, " ")),
		BuiltDate: epoch.Format("2006-01-02T15:04:05Z"),
	}
	doc.Packages = append(doc.Packages, binary)
	doc.Relationships = append(doc.Relationships, &spdx.Relationship{
		RefA: common.MakeDocElementID("", "DOCUMENT"), RefB: common.MakeDocElementID("", string(binID)), Relationship: "DESCRIBES"})

	mainID := common.ElementID("Module-main")
	main := module(mainID, &bi.Main, opts.Source, opts.Revision)
	main.PackageVersion = opts.Version
	doc.Packages = append(doc.Packages, main)
	doc.Relationships = append(doc.Relationships, &spdx.Relationship{
		RefA: common.MakeDocElementID("", string(binID)), RefB: common.MakeDocElementID("", string(mainID)), Relationship: "GENERATED_FROM"})

	stdID := common.ElementID("Module-stdlib")
	goVersion := strings.TrimPrefix(bi.GoVersion, "go")
	doc.Packages = append(doc.Packages, &spdx.Package{
		PackageName: "stdlib", PackageSPDXIdentifier: stdID, PackageVersion: bi.GoVersion,
		PackageDownloadLocation: "https://go.dev/dl/", PackageSupplier: &common.Supplier{SupplierType: "Organization", Supplier: "Google LLC"},
		PackageLicenseConcluded: "BSD-3-Clause", PackageLicenseDeclared: "BSD-3-Clause", PackageCopyrightText: "NOASSERTION",
		PackageExternalReferences: []*spdx.PackageExternalReference{{Category: "PACKAGE-MANAGER", RefType: "purl",
			Locator: "pkg:golang/stdlib@" + goVersion}},
		PrimaryPackagePurpose: "LIBRARY",
	})
	doc.Relationships = append(doc.Relationships, &spdx.Relationship{
		RefA: common.MakeDocElementID("", string(mainID)), RefB: common.MakeDocElementID("", string(stdID)), Relationship: "DEPENDS_ON"})

	for i, dep := range bi.Deps {
		id := common.ElementID(fmt.Sprintf("Module-%d-%s", i, spdxIDChars.ReplaceAllString(dep.Path, "-")))
		var p *spdx.Package
		if dep.Version == "(devel)" && dep.Replace == nil {
			// Another module of this workspace: built from the same source and revision.
			p = module(id, dep, opts.Source, opts.Revision)
			p.PackageVersion, p.PrimaryPackagePurpose = opts.Version, "LIBRARY"
		} else {
			p = module(id, dep, "", "")
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, &spdx.Relationship{
			RefA: common.MakeDocElementID("", string(mainID)), RefB: common.MakeDocElementID("", string(id)), Relationship: "DEPENDS_ON"})
	}
	var buf bytes.Buffer
	if err := spdxjson.Write(doc, &buf, spdxjson.Indent("  ")); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var spdxIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func module(id common.ElementID, m *debug.Module, source, revision string) *spdx.Package {
	if m.Replace != nil {
		m = m.Replace
	}
	version := m.Version
	p := &spdx.Package{
		PackageName: m.Path, PackageSPDXIdentifier: id, PackageVersion: version,
		PackageDownloadLocation: "NOASSERTION", PackageLicenseConcluded: "NOASSERTION", PackageLicenseDeclared: "NOASSERTION",
		PackageCopyrightText: "NOASSERTION", PrimaryPackagePurpose: "LIBRARY",
		PackageExternalReferences: []*spdx.PackageExternalReference{{Category: "PACKAGE-MANAGER", RefType: "purl",
			Locator: "pkg:golang/" + m.Path + "@" + version}},
	}
	if source != "" {
		p.PackageDownloadLocation = "git+" + source + "@" + revision
		p.PrimaryPackagePurpose = "APPLICATION"
		p.PackageExternalReferences[0].Locator = "pkg:golang/" + m.Path + "?vcs_url=" + url.QueryEscape("git+"+source+"@"+revision)
	} else if version != "" && version != "(devel)" {
		p.PackageDownloadLocation = "https://proxy.golang.org/" + m.Path + "/@v/" + version + ".zip"
	}
	// go.sum's h1: hash is a base64 SHA-256 (of the module's file list and hashes).
	if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		if raw, err := base64.StdEncoding.DecodeString(h); err == nil {
			p.PackageChecksums = []common.Checksum{{Algorithm: common.SHA256, Value: hex.EncodeToString(raw)}}
		}
	}
	return p
}

// sbomArtifact is an OCI 1.1 artifact manifest carrying an SBOM, with subject set to the image
// it describes: what registries list under the referrers API (or cosign-style tag fallback).
type sbomArtifact struct {
	manifest []byte
	sbom     v1.Layer
}

var emptyConfig = []byte("{}")

// NewSBOMArtifact wraps an SPDX document as a referrer of subject.
func NewSBOMArtifact(sbom []byte, subject v1.Descriptor, annotations map[string]string) (v1.Image, error) {
	layer := static.NewLayer(sbom, types.MediaType(SBOMArtifactType))
	ld, err := partial.Descriptor(layer)
	if err != nil {
		return nil, err
	}
	ld.Annotations = map[string]string{"org.opencontainers.image.title": "sbom.spdx.json"}
	cfgHash, cfgSize, _ := v1.SHA256(bytes.NewReader(emptyConfig))
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  SBOMArtifactType,
		Config:        v1.Descriptor{MediaType: "application/vnd.oci.empty.v1+json", Digest: cfgHash, Size: cfgSize, Data: emptyConfig},
		Layers:        []v1.Descriptor{*ld},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations:   annotations,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&sbomArtifact{manifest: raw, sbom: layer})
}

func (a *sbomArtifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *sbomArtifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *sbomArtifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *sbomArtifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, _ := a.sbom.Digest(); d == h {
		return a.sbom, nil
	}
	return nil, fmt.Errorf("the SBOM artifact has no blob %s", h)
}

// SBOMOf returns the SPDX document an artifact made by NewSBOMArtifact carries.
func SBOMOf(img v1.Image) ([]byte, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	if m.ArtifactType != SBOMArtifactType || len(m.Layers) != 1 {
		return nil, fmt.Errorf("not an SBOM artifact (artifactType %q, %d layers)", m.ArtifactType, len(m.Layers))
	}
	l, err := img.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(rc)
	return b.Bytes(), err
}
