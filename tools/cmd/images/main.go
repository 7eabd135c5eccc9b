// Command images builds the controllers' images without a Docker engine and keeps the shipped
// references (images.yaml) and every place derived from them in step.
//
//	images build [-push REGISTRY [-update] | -layout DIR] [-version V] [-revision R] [-sbom-dir DIR] [-platforms OS/ARCH,...] [name...]
//	images sync     derive every place (packages, charts, READMEs, docs) from images.yaml
//	images check    fail when a derived place does not name the references in images.yaml, or a
//	                package's Makefile another release than deploy/cozystack/reserved-ips.yaml
//	images publish -registry REGISTRY -version V [-out DIR] [-plain-http]
//
// With -push, each image goes to REGISTRY/<name>:<version> with one SPDX SBOM referrer per
// platform (credentials from the Docker config), and the command prints one
// "name ref@sha256:..." line per image; -update then writes the pushed references into
// images.yaml and derives every other place from it. With -layout, the images and their SBOMs
// are written into an OCI image layout. -sbom-dir also writes each SBOM as
// <name>_<platform image digest hex>.spdx.json, for signing tools to attest.
//
// publish pushes both charts as OCI Helm charts to REGISTRY/charts/<name>:<version> with the Helm
// SDK, writes the version into each packages/system/<name>/Makefile (RESERVED_IPS_VERSION), and
// pushes packages/ as a Flux OCI artifact to REGISTRY/reserved-ips-packages:<version> (what the
// out-of-tree PackageSources of deploy/cozystack/reserved-ips.yaml read, whose OCIRepository it
// points at that digest), prints one "kind ref@sha256:..." line each (for signing), and writes
// images.txt, charts.txt, hauler.yaml, the release notes (images.ReleaseNotesFile, with the
// upgrade notes of docs/upgrading.md) and each chart as <name>-<version>.tgz into DIR (default bin/release).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/images"
	"github.com/cozystack/reserved-ips/tools/sandbox"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const usage = "usage: images build [-push REGISTRY [-update] | -layout DIR] [-version V] [-revision R] [-sbom-dir DIR] [-platforms OS/ARCH,...] [name...] | sync | check | publish -registry REGISTRY -version V [-out DIR] [-plain-http]"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "build":
		fs := flag.NewFlagSet("build", flag.ExitOnError)
		o := buildFlags{}
		fs.StringVar(&o.push, "push", "", "registry to push to (for example ghcr.io/cozystack)")
		fs.StringVar(&o.dir, "layout", "", "OCI layout directory to write to")
		fs.StringVar(&o.version, "version", "", "version (default: main-<short revision>)")
		fs.StringVar(&o.revision, "revision", "", "revision (default: git HEAD)")
		fs.StringVar(&o.source, "source", "https://github.com/cozystack/reserved-ips", "source repository URL")
		fs.StringVar(&o.sbomDir, "sbom-dir", "", "also write each SBOM into this directory")
		fs.StringVar(&o.platforms, "platforms", "", "comma-separated OS/ARCH list (default: linux/amd64,linux/arm64, what a release ships)")
		fs.BoolVar(&o.update, "update", false, "with -push: write the pushed references into images.yaml and derive every other place")
		_ = fs.Parse(os.Args[2:])
		if err := build(root, o, fs.Args()); err != nil {
			fail(err)
		}
	case "sync":
		s, err := images.ReadShipped(root)
		if err != nil {
			fail(err)
		}
		changed, err := images.Sync(root, s, s)
		for _, f := range changed {
			rel, _ := filepath.Rel(root, f)
			fmt.Println("updated", rel)
		}
		if err != nil {
			fail(err)
		}
	case "check":
		s, err := images.ReadShipped(root)
		if err != nil {
			fail(err)
		}
		stale, err := images.Stale(root, s)
		if err != nil {
			fail(err)
		}
		if len(stale) > 0 {
			fail(fmt.Errorf("places that do not name the references in %s (run `make sync-images`):\n  %s",
				images.ShippedFile, strings.Join(stale, "\n  ")))
		}
		versions, err := images.StalePackagesVersion(root)
		if err != nil {
			fail(err)
		}
		if len(versions) > 0 {
			fail(fmt.Errorf("packages that do not name the checkout's release:\n  %s", strings.Join(versions, "\n  ")))
		}
	case "publish":
		fs := flag.NewFlagSet("publish", flag.ExitOnError)
		reg := fs.String("registry", "", "registry to publish to (for example ghcr.io/cozystack)")
		version := fs.String("version", "", "release version (v0.1.0; the charts get 0.1.0)")
		out := fs.String("out", filepath.Join(root, "bin", "release"), "directory for images.txt, charts.txt and hauler.yaml")
		plain := fs.Bool("plain-http", false, "talk plain HTTP to the registry (a local test registry)")
		_ = fs.Parse(os.Args[2:])
		if *reg == "" || *version == "" {
			fail(fmt.Errorf("publish needs -registry and -version"))
		}
		if err := publish(root, strings.TrimSuffix(strings.TrimPrefix(*reg, "oci://"), "/"), *version, *out, *plain); err != nil {
			fail(err)
		}
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
}

// publish pushes the charts and the packages artifact and writes the release files.
func publish(root, reg, version, out string, plainHTTP bool) error {
	shipped, err := images.ReadShipped(root)
	if err != nil {
		return err
	}
	if stale, err := images.Stale(root, shipped); err != nil || len(stale) > 0 {
		return fmt.Errorf("the charts do not name the shipped images (run make sync-images first): %v %v", stale, err)
	}
	rev, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return fmt.Errorf("reading the revision: %w", err)
	}
	notes, err := images.ReadUpgradeNotes(root)
	if err != nil {
		return err
	}
	files := images.ReleaseFiles{Images: shipped, Charts: map[string]string{}, Version: version,
		MetalLB: binaries.DefaultMetalLBVersion, UpgradeNotes: notes}
	for _, img := range images.Images {
		ref, err := charts.PublishChart(charts.Dir(root, img.Name), reg+"/charts", version, plainHTTP)
		if err != nil {
			return err
		}
		files.Charts[img.Name] = ref
		fmt.Println("chart", ref)
		// The same chart as an archive beside the lists, for sites that install from files.
		if _, err := charts.PackageChart(charts.Dir(root, img.Name), version, out); err != nil {
			return err
		}
	}
	// The packages name the release they are pushed as: their Makefiles' update and image targets
	// pull its chart and build its source.
	if err := images.PinPackagesVersion(root, version); err != nil {
		return err
	}
	pkgs, err := images.PushPackages(root, reg, version, strings.TrimSpace(string(rev)), plainHTTP)
	if err != nil {
		return err
	}
	files.Packages = pkgs
	fmt.Println("packages", pkgs)
	if err := images.PinOutOfTree(root, pkgs); err != nil {
		return err
	}
	return files.Write(out)
}

type buildFlags struct {
	push, dir, version, revision, source, sbomDir string
	platforms                                     string
	update                                        bool
}

func build(root string, o buildFlags, names []string) error {
	if (o.push == "") == (o.dir == "") {
		return fmt.Errorf("give exactly one of -push and -layout")
	}
	if o.update && o.push == "" {
		return fmt.Errorf("-update needs -push: only pushed digests are shipped")
	}
	if o.revision == "" {
		out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
		if err != nil {
			return fmt.Errorf("reading the revision (pass -revision): %w", err)
		}
		o.revision = strings.TrimSpace(string(out))
	}
	if o.version == "" {
		o.version = "main-" + o.revision[:min(7, len(o.revision))]
	}
	todo := images.Images
	if len(names) > 0 {
		todo = nil
		for _, n := range names {
			found := false
			for _, img := range images.Images {
				if img.Name == n {
					todo, found = append(todo, img), true
				}
			}
			if !found {
				return fmt.Errorf("unknown image %q", n)
			}
		}
	}
	var shipped, pushed images.Shipped
	if o.update {
		var err error
		if shipped, err = images.ReadShipped(root); err != nil {
			return err
		}
		pushed = images.Shipped{}
		for k, v := range shipped {
			pushed[k] = v
		}
	}
	var platforms []v1.Platform
	if o.platforms != "" {
		var err error
		if platforms, err = images.ParsePlatforms(o.platforms); err != nil {
			return fmt.Errorf("-platforms: %w", err)
		}
	}
	// Build every image before pushing any, so a failed build pushes nothing.
	built := map[string]*images.Built{}
	for _, img := range todo {
		b, err := images.Build(context.Background(), img, images.Options{Root: root, Version: o.version, Revision: o.revision,
			Source: o.source, Platforms: platforms, Progress: os.Stderr})
		if err != nil {
			return err
		}
		built[img.Name] = b
		if o.sbomDir != "" {
			if err := writeSBOMs(o.sbomDir, img.Name, b); err != nil {
				return err
			}
		}
	}
	for _, img := range todo {
		b := built[img.Name]
		if o.push != "" {
			ref, err := images.Push(strings.TrimSuffix(o.push, "/")+"/"+img.Name+":"+o.version, b)
			if err != nil {
				return err
			}
			fmt.Println(img.Name, ref)
			if o.update {
				pushed[img.Name] = ref
			}
			continue
		}
		if err := images.WriteLayout(o.dir, img.Name+":"+o.version, b); err != nil {
			return err
		}
		d, _ := b.Index.Digest()
		fmt.Printf("%s %s:%s@%s (in %s)\n", img.Name, img.Name, o.version, d, o.dir)
	}
	if o.update {
		if err := images.WriteShipped(root, pushed); err != nil {
			return err
		}
		changed, err := images.Sync(root, shipped, pushed)
		for _, f := range changed {
			rel, _ := filepath.Rel(root, f)
			fmt.Fprintln(os.Stderr, "updated", rel)
		}
		return err
	}
	return nil
}

func writeSBOMs(dir, name string, b *images.Built) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	subjects, err := b.Subjects()
	if err != nil {
		return err
	}
	for i, s := range b.SBOMs {
		doc, err := images.SBOMOf(s)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"_"+subjects[i].Hex+".spdx.json"), doc, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "images:", err)
	os.Exit(1)
}
