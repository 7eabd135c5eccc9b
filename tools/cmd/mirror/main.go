// Command mirror copies the images the Cozystack packages ship to a mirror registry by digest,
// every platform, verifying the copy; for sites with no route at all it saves them to one archive
// and pushes them from it. It ends by printing the Package values that point the packages at the
// mirror.
//
//	mirror copy -to REGISTRY/PREFIX [-dry-run] [-concurrency N] [component=ref ...]
//	mirror save -archive FILE [component=ref ...]
//	mirror load -archive FILE -to REGISTRY/PREFIX
//
// Without component=ref arguments the images are read from packages/system/*/values.yaml.
// Registry credentials come from the Docker config (~/.docker/config.json).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/cozystack/reserved-ips/tools/mirror"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	to := fs.String("to", "", "destination registry and path prefix, e.g. mirror.example.org/cozystack")
	archive := fs.String("archive", "", "archive file (save, load)")
	dryRun := fs.Bool("dry-run", false, "say what would be copied; copy nothing")
	concurrency := fs.Int("concurrency", 4, "images copied at once")
	packages := fs.String("packages", "", "packages directory (default: packages/ in the checkout)")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := mirror.Options{Dest: *to, DryRun: *dryRun, Concurrency: *concurrency, Progress: os.Stderr}

	var results []mirror.Result
	var err error
	switch os.Args[1] {
	case "copy":
		if *to == "" {
			fail(fmt.Errorf("copy needs -to"))
		}
		results, err = mirror.Mirror(ctx, images(*packages, fs.Args()), opts)
	case "save":
		if *archive == "" {
			fail(fmt.Errorf("save needs -archive"))
		}
		if err := mirror.Save(ctx, images(*packages, fs.Args()), *archive, opts); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "saved to %s; carry it over and run: mirror load -archive %s -to REGISTRY/PREFIX\n", *archive, filepath.Base(*archive))
		return
	case "load":
		if *archive == "" || *to == "" {
			fail(fmt.Errorf("load needs -archive and -to"))
		}
		results, err = mirror.Load(ctx, *archive, opts)
	default:
		usage()
	}
	for _, r := range results {
		state := "verified (already there)"
		switch {
		case *dryRun && !r.Copied:
			state = "would copy (dry run)"
		case r.Copied:
			state = "copied and verified"
		}
		fmt.Fprintf(os.Stderr, "%-20s %s → %s: %s\n", r.Component, r.Source, r.Dest, state)
	}
	if err != nil {
		fail(err)
	}
	if !*dryRun {
		fmt.Print("# Point the packages at the mirror:\n" + mirror.PackageValues(results))
	}
}

func images(packages string, args []string) map[string]string {
	if len(args) > 0 {
		out := map[string]string{}
		for _, a := range args {
			component, ref, ok := strings.Cut(a, "=")
			if !ok {
				fail(fmt.Errorf("%q: want component=ref", a))
			}
			out[component] = ref
		}
		return out
	}
	if packages == "" {
		root, err := sandbox.RepoRoot()
		if err != nil {
			fail(err)
		}
		packages = filepath.Join(root, "packages")
	}
	out, err := mirror.PackageImages(packages)
	if err != nil {
		fail(err)
	}
	return out
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mirror copy -to REGISTRY/PREFIX [-dry-run] | save -archive FILE | load -archive FILE -to REGISTRY/PREFIX [component=ref ...]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mirror:", err)
	os.Exit(1)
}
