// Command images builds the controllers' images without a Docker engine.
//
//	images build [-push REGISTRY | -layout DIR] [-version V] [-revision R] [name...]
//
// With -push, each image goes to REGISTRY/<name>:<version> (credentials from the Docker config)
// and the command prints one "name ref@sha256:..." line per image; with -layout, the images are
// written into an OCI image layout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cozystack/reserved-ips/tools/images"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "build" {
		fmt.Fprintln(os.Stderr, "usage: images build [-push REGISTRY | -layout DIR] [-version V] [-revision R] [name...]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	push := fs.String("push", "", "registry to push to (for example ghcr.io/cozystack)")
	dir := fs.String("layout", "", "OCI layout directory to write to")
	version := fs.String("version", "", "version (default: main-<short revision>)")
	revision := fs.String("revision", "", "revision (default: git HEAD)")
	source := fs.String("source", "https://github.com/cozystack/reserved-ips", "source repository URL")
	update := fs.Bool("update-packages", false, "with -push: point packages/system/<name>/values.yaml at the pushed digests")
	_ = fs.Parse(os.Args[2:])
	if err := run(*push, *dir, *version, *revision, *source, *update, fs.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(push, dir, version, revision, source string, update bool, names []string) error {
	if (push == "") == (dir == "") {
		return fmt.Errorf("give exactly one of -push and -layout")
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		return err
	}
	if revision == "" {
		out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
		if err != nil {
			return fmt.Errorf("reading the revision (pass -revision): %w", err)
		}
		revision = strings.TrimSpace(string(out))
	}
	if version == "" {
		version = "main-" + revision[:min(7, len(revision))]
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
	for _, img := range todo {
		idx, err := images.Build(context.Background(), img, images.Options{Root: root, Version: version, Revision: revision,
			Source: source, Progress: os.Stderr})
		if err != nil {
			return err
		}
		if push != "" {
			ref, err := images.Push(strings.TrimSuffix(push, "/")+"/"+img.Name+":"+version, idx)
			if err != nil {
				return err
			}
			fmt.Println(img.Name, ref)
			if update {
				if err := images.UpdatePackageValues(filepath.Join(root, "packages"), img.Name, ref); err != nil {
					return err
				}
			}
			continue
		}
		if err := images.WriteLayout(dir, img.Name+":"+version, idx); err != nil {
			return err
		}
		d, _ := idx.Digest()
		fmt.Printf("%s %s:%s@%s (in %s)\n", img.Name, img.Name, version, d, dir)
	}
	return nil
}
