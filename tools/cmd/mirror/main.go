// Command mirror copies the images the Cozystack packages ship to a mirror registry by digest,
// every platform, with their signatures, attestations and SBOMs (OCI referrers and cosign's tag
// scheme), verifying the copy; for sites with no route at all it saves them to one archive (an
// OCI image layout in a tar, with a .sha256 checksum file) and pushes them from it. It ends by
// printing the Package values that point the packages at the mirror.
//
//	mirror copy -to REGISTRY/PREFIX [flags] [component=ref ...]
//	mirror save -archive FILE [flags] [component=ref ...]
//	mirror load -archive FILE -to REGISTRY/PREFIX [flags]
//	mirror platforms [flags] REPOSITORY@sha256:... ...
//
// platforms prints the digest reference of each platform image of the given images, one a line
// (what the release attests each SBOM to, for cosign verify-attestation).
//
// Without component=ref arguments the images are read from packages/system/*/values.yaml, and
// the charts with them: both charts and the packages artifact of the release the checkout
// carries (the registry and version deploy/cozystack/reserved-ips.yaml names), resolved to
// digests. -charts FILE takes them from a chart list instead (charts.txt of `make release`), a
// name=oci://... argument names one, -no-charts leaves them out. load pushes whatever the
// archive holds; charts go to PREFIX/charts/<name>.
// Registry access: -creds [HOST=]USER:PASSWORD (HOST defaults to the -to registry), -authfile
// (Docker or Podman auth file), else the Docker config; -ca-file, -insecure HOST, -plain-http HOST
// (both repeatable), -retries N. On partial failure the images that were copied are reported and
// their Package values printed, the failures listed, and the exit status is 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/cozystack/reserved-ips/tools/mirror"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	os.Exit(run(os.Args[1], os.Args[2:]))
}

func run(cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	to := fs.String("to", "", "destination registry and path prefix, e.g. mirror.example.org/cozystack")
	archive := fs.String("archive", "", "archive file (save, load)")
	dryRun := fs.Bool("dry-run", false, "say what would be copied; copy nothing")
	concurrency := fs.Int("concurrency", 4, "images copied at once")
	packages := fs.String("packages", "", "packages directory (default: packages/ in the checkout)")
	noReferrers := fs.Bool("no-referrers", false, "copy the images alone, without signatures, attestations and SBOMs")
	keepPath := fs.Bool("keep-path", false, "keep the source repository path under -to (ghcr.io/cozystack/x → PREFIX/cozystack/x) instead of PREFIX/x")
	caFile := fs.String("ca-file", "", "PEM file of CA certificates to trust besides the system's")
	authFile := fs.String("authfile", "", "Docker or Podman auth file (default: the Docker config)")
	chartList := fs.String("charts", "", "chart list (charts.txt of make release: oci://repository:version@sha256:... a line) to copy or save with the images (default: the release's charts, from the checkout)")
	noCharts := fs.Bool("no-charts", false, "copy or save the images alone, without the charts")
	retries := fs.Int("retries", 3, "retries of a request that failed with a temporary error, 408, 429 or 5xx (exponential backoff)")
	var insecure, plainHTTP, creds list
	fs.Var(&insecure, "insecure", "registry HOST[:PORT] reached over TLS without verifying its certificate (repeatable)")
	fs.Var(&plainHTTP, "plain-http", "registry HOST[:PORT] reached over plain HTTP (repeatable)")
	fs.Var(&creds, "creds", "[HOST=]USER:PASSWORD for a registry; HOST defaults to the -to registry; when USER:PASSWORD's text before a '=' reads as HOST:PORT, give HOST= (repeatable)")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	access := mirror.Access{Insecure: insecure, PlainHTTP: plainHTTP, CAFile: *caFile, AuthFile: *authFile, Retries: *retries,
		Creds: map[string]authn.AuthConfig{}}
	for _, c := range creds {
		host, userpass, ok := cutHost(c)
		if !ok {
			userpass, host = c, ""
			if *to != "" {
				if r, err := name.NewRepository(*to); err == nil {
					host = r.RegistryStr()
				}
			}
			if host == "" {
				return fail(fmt.Errorf("-creds USER:PASSWORD without HOST= needs -to"))
			}
		}
		user, pass, ok := strings.Cut(userpass, ":")
		if !ok {
			// Not echoed: a value that was taken for HOST= may hold part of a password.
			return fail(fmt.Errorf("a -creds value is not USER:PASSWORD (give HOST=USER:PASSWORD when the user or password holds '=' or ':')"))
		}
		access.Creds[host] = authn.AuthConfig{Username: user, Password: pass}
	}
	opts := mirror.Options{Dest: *to, DryRun: *dryRun, Concurrency: *concurrency, Progress: os.Stderr, NoReferrers: *noReferrers,
		KeepPath: *keepPath, Access: access}

	var results []mirror.Result
	var err error
	switch cmd {
	case "copy":
		if *to == "" {
			return fail(fmt.Errorf("copy needs -to"))
		}
		imgs, chs, err2 := artifacts(*packages, *chartList, *noCharts, fs.Args())
		if err2 != nil {
			return fail(err2)
		}
		opts.Charts = chs
		results, err = mirror.Mirror(ctx, imgs, opts)
	case "save":
		if *archive == "" {
			return fail(fmt.Errorf("save needs -archive"))
		}
		imgs, chs, err2 := artifacts(*packages, *chartList, *noCharts, fs.Args())
		if err2 != nil {
			return fail(err2)
		}
		opts.Charts = chs
		results, err = mirror.Save(ctx, imgs, *archive, opts)
		for _, r := range results {
			fmt.Fprintf(os.Stderr, "%-20s %s: saved with %d attachments\n", label(r), r.Source, len(r.Attachments))
		}
		if len(results) > 0 {
			fmt.Fprintf(os.Stderr, "saved to %s (checksum in %s); carry both and run: mirror load -archive %s -to REGISTRY/PREFIX\n",
				*archive, mirror.ChecksumFile(*archive), filepath.Base(*archive))
		}
		if err != nil {
			return fail(fmt.Errorf("not saved:\n%w", err))
		}
		return 0
	case "platforms":
		if fs.NArg() == 0 {
			return fail(fmt.Errorf("platforms needs one or more digest references"))
		}
		for _, ref := range fs.Args() {
			ps, err := mirror.Platforms(ctx, ref, access)
			if err != nil {
				return fail(err)
			}
			for _, p := range ps {
				fmt.Println(p.Ref)
				fmt.Fprintf(os.Stderr, "%s: %s %s\n", ref, p.Platform, p.Ref)
			}
		}
		return 0
	case "load":
		if *archive == "" || *to == "" {
			return fail(fmt.Errorf("load needs -archive and -to"))
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
		fmt.Fprintf(os.Stderr, "%-20s %s → %s: %s, %d attachments\n", label(r), r.Source, r.Dest, state, len(r.Attachments))
	}
	if !*dryRun && len(results) > 0 {
		fmt.Print("# Point the packages at the mirror:\n" + mirror.PackageValues(results))
	}
	if err != nil {
		return fail(fmt.Errorf("not copied:\n%w", err))
	}
	return 0
}

// cutHost splits "HOST=USER:PASSWORD". The text before the first '=' is a host only when it
// reads as one: a name, or name:port with a numeric port. Otherwise the '=' belongs to the
// password (base64 tokens end in '='), and there is no HOST.
func cutHost(c string) (host, userpass string, ok bool) {
	host, userpass, ok = strings.Cut(c, "=")
	if !ok || host == "" {
		return "", c, false
	}
	if strings.HasPrefix(host, "[") {
		// A bracketed IPv6 literal, with or without a port: [::1] or [::1]:5000.
		end := strings.Index(host, "]")
		if end < 0 || (end+1 < len(host) && (host[end+1] != ':' || end+2 == len(host) || strings.Trim(host[end+2:], "0123456789") != "")) {
			return "", c, false
		}
		return host, userpass, true
	}
	if i := strings.LastIndex(host, ":"); i >= 0 {
		port := host[i+1:]
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return "", c, false
		}
	}
	return host, userpass, true
}

func label(r mirror.Result) string {
	if r.Chart {
		return "chart " + r.Component
	}
	return r.Component
}

// artifacts are the images and charts to copy or save: the arguments' (name=oci://... a chart,
// component=ref an image), else the checkout's; -charts replaces the charts, -no-charts drops them.
func artifacts(packages, chartList string, noCharts bool, args []string) (imgs, chs map[string]string, err error) {
	if len(args) > 0 {
		imgs, chs = map[string]string{}, map[string]string{}
		for _, a := range args {
			component, ref, ok := strings.Cut(a, "=")
			if !ok {
				return nil, nil, fmt.Errorf("%q: want component=ref", a)
			}
			if strings.HasPrefix(ref, "oci://") {
				chs[component] = ref
			} else {
				imgs[component] = ref
			}
		}
	} else {
		if packages == "" {
			root, err := sandbox.RepoRoot()
			if err != nil {
				return nil, nil, err
			}
			packages = filepath.Join(root, "packages")
		}
		if imgs, err = mirror.PackageImages(packages); err != nil {
			return nil, nil, err
		}
		if chartList == "" && !noCharts {
			if chs, err = mirror.PackageCharts(filepath.Dir(packages)); err != nil {
				return nil, nil, fmt.Errorf("the release's charts (give -charts FILE, or -no-charts to leave them out): %w", err)
			}
		}
	}
	if chartList != "" {
		if chs, err = mirror.ReadChartList(chartList); err != nil {
			return nil, nil, err
		}
	}
	if noCharts {
		chs = nil
	}
	return imgs, chs, nil
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mirror copy -to REGISTRY/PREFIX | save -archive FILE | load -archive FILE -to REGISTRY/PREFIX | platforms REPOSITORY@DIGEST... [flags] [component=ref ...]; -h lists the flags")
	os.Exit(2)
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "mirror:", err)
	return 1
}
