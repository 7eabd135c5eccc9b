// Command mirror copies the images the Cozystack packages ship to a mirror registry by digest,
// every platform, with their signatures, attestations and SBOMs (OCI referrers and cosign's tag
// scheme), verifying the copy; for sites with no route at all it saves them to one archive (an
// OCI image layout in a tar, with a .sha256 checksum file) and pushes them from it. It ends by
// printing the Package values that point the packages at the mirror.
//
//	mirror copy --to REGISTRY/PREFIX [flags] [component=ref ...]
//	mirror save --archive FILE [flags] [component=ref ...]
//	mirror load --archive FILE --to REGISTRY/PREFIX [flags]
//	mirror platforms [flags] REPOSITORY@sha256:... ...
//
// Each command takes its own flags, before or after its arguments; `mirror COMMAND --help` lists
// them. platforms prints the digest reference of each platform image of the given images, one a
// line (what the release attests each SBOM to, for cosign verify-attestation).
//
// Without component=ref arguments the images are read from packages/system/*/values.yaml, and
// the charts with them: both charts and the packages artifact of the release the checkout
// carries (the registry and version deploy/cozystack/reserved-ips.yaml names), resolved to
// digests. --charts FILE takes them from a chart list instead (charts.txt of `make release`), a
// name=oci://... argument names one, --no-charts leaves them out. load pushes whatever the
// archive holds; charts go to PREFIX/charts/<name>.
//
// Registry access: credentials as [HOST=]USER:PASSWORD lines (HOST defaults to the --to
// registry) in the MIRROR_CREDS environment variable or, with --creds-stdin, on standard input;
// --authfile (Docker or Podman auth file); else the Docker config. --ca-file, --insecure HOST,
// --plain-http HOST (both repeatable), --retries N. A password is never taken on the command
// line, where other users of the machine see it (ps) and the shell history keeps it. On partial
// failure the images that were copied are reported and their Package values printed, the
// failures listed, and the exit status is 1; a usage error exits 2.
//
// The printed Packages are those of deploy/cozystack/reserved-ips.yaml (reserved-ips.<component>)
// with the image set; --package-prefix cozystack names them for Cozystack's own packages
// (cozystack.<component>) instead.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cozystack/reserved-ips/tools/mirror"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// CredsEnv is the environment variable that holds registry credentials, one
// [HOST=]USER:PASSWORD a line.
const CredsEnv = "MIRROR_CREDS"

// credsMigration is the answer to the -creds flag, which took the password on the command line.
const credsMigration = "the -creds flag is gone: a password on the command line is seen by every user of the machine (ps) and kept in the shell history. " +
	"Give the same [HOST=]USER:PASSWORD in the " + CredsEnv + " environment variable (one a line), or on standard input with --creds-stdin"

// streams are what a run reads and writes, and its environment.
type streams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], streams{os.Stdin, os.Stdout, os.Stderr, os.Getenv})
	stop()
	os.Exit(code)
}

// failure is an error of the work itself (exit status 1), as opposed to a usage error (2).
type failure struct{ error }

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, s streams) int {
	root := newRoot(s)
	root.SetArgs(args)
	err := singleDashFlag(root, args)
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	if err == nil {
		return 0
	}
	var f failure
	if errors.As(err, &f) {
		fmt.Fprintln(s.stderr, "mirror:", f.error)
		return 1
	}
	fmt.Fprintln(s.stderr, "mirror:", err)
	fmt.Fprintln(s.stderr, "Run 'mirror --help' or 'mirror COMMAND --help' for usage.")
	return 2
}

func newRoot(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "mirror",
		Short: "Copy the shipped images and charts, with their signatures and SBOMs, to a mirror registry or an archive",
		Long: "Copy the shipped images and charts, with their signatures and SBOMs, to a mirror registry (copy), or through an archive (save, then load), " +
			"and print the Package values that point the packages at the mirror. Registry credentials: " + CredsEnv + " or --creds-stdin, --authfile, else the Docker config.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("name a command: copy, save, load or platforms")
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(s.stdin)
	root.SetOut(s.stdout)
	root.SetErr(s.stderr)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(copyCmd(s), saveCmd(s), loadCmd(s), platformsCmd(s))
	return root
}

// singleDashFlag refuses a long flag written with one dash (-to, -archive=FILE, -help), which
// earlier builds took: pflag reads it as a run of shorthands and fails on the second letter
// ("unknown shorthand flag: 'e' in -elp"), which names neither the flag nor the fix. Arguments
// after "--" are left alone.
func singleDashFlag(root *cobra.Command, args []string) error {
	long := map[string]bool{"help": true}
	for _, c := range append([]*cobra.Command{root}, root.Commands()...) {
		c.Flags().VisitAll(func(f *pflag.Flag) { long[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { long[f.Name] = true })
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		switch {
		case name == "creds":
			return errors.New(credsMigration)
		case long[name]:
			return fmt.Errorf("unknown shorthand flag: %q in %s (long flags take two dashes: --%s)", a[1], a, name)
		}
	}
	return nil
}

var singleDash = regexp.MustCompile(`(?:^|\s)(--?)([a-z][a-z-]+)(?:\s|$|=)`)

// flagError explains the flags the command line took before it moved to two dashes: -to
// reads as the shorthands -t -o, and -creds is gone.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if m := singleDash.FindStringSubmatch(strings.TrimPrefix(msg, "unknown shorthand flag: ")); m != nil {
		switch {
		case m[2] == "creds":
			return errors.New(credsMigration)
		case m[1] == "-" && cmd.Flags().Lookup(m[2]) != nil:
			return fmt.Errorf("%w (long flags take two dashes: --%s)", err, m[2])
		}
	}
	return err
}

// registryFlags say how to reach the registries; every command takes them.
type registryFlags struct {
	caFile, authFile    string
	insecure, plainHTTP []string
	retries             int
	credsStdin          bool
}

func (r *registryFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&r.caFile, "ca-file", "", "PEM file of CA certificates to trust besides the system's")
	fs.StringVar(&r.authFile, "authfile", "", "Docker or Podman auth file (default: the Docker config)")
	fs.StringArrayVar(&r.insecure, "insecure", nil, "registry HOST[:PORT] reached over TLS without verifying its certificate (repeatable)")
	fs.StringArrayVar(&r.plainHTTP, "plain-http", nil, "registry HOST[:PORT] reached over plain HTTP (repeatable)")
	fs.IntVar(&r.retries, "retries", 3, "retries of a request that failed with a temporary error, 408, 429 or 5xx (exponential backoff)")
	fs.BoolVar(&r.credsStdin, "creds-stdin", false, "read registry credentials from standard input, one [HOST=]USER:PASSWORD a line, as in "+CredsEnv)
}

// access builds the registry access; to is the --to registry that credentials without HOST=
// are for.
func (r *registryFlags) access(s streams, to string) (mirror.Access, error) {
	a := mirror.Access{Insecure: r.insecure, PlainHTTP: r.plainHTTP, CAFile: r.caFile, AuthFile: r.authFile, Retries: r.retries,
		Creds: map[string]authn.AuthConfig{}}
	lines := strings.Split(s.getenv(CredsEnv), "\n")
	if r.credsStdin {
		data, err := io.ReadAll(s.stdin)
		if err != nil {
			return a, fmt.Errorf("reading credentials from standard input: %w", err)
		}
		lines = append(lines, strings.Split(string(data), "\n")...)
	}
	for _, c := range lines {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		host, userpass, ok := cutHost(c)
		if !ok {
			userpass, host = c, ""
			if to != "" {
				if r, err := name.NewRepository(to); err == nil {
					host = r.RegistryStr()
				}
			}
			if host == "" {
				return a, errors.New("credentials USER:PASSWORD without HOST= are for the --to registry, and this command has none: give HOST=USER:PASSWORD")
			}
		}
		user, pass, ok := strings.Cut(userpass, ":")
		if !ok {
			// Not echoed: a value that was taken for HOST= may hold part of a password.
			return a, errors.New("a credential is not [HOST=]USER:PASSWORD (give HOST=USER:PASSWORD when the user or password holds '=' or ':')")
		}
		a.Creds[host] = authn.AuthConfig{Username: user, Password: pass}
	}
	return a, nil
}

// sourceFlags choose what copy and save carry.
type sourceFlags struct {
	packages, chartList string
	noCharts            bool
}

func (f *sourceFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.packages, "packages", "", "packages directory (default: packages/ in the checkout)")
	fs.StringVar(&f.chartList, "charts", "", "chart list (charts.txt of make release: oci://repository:version@sha256:... a line) to carry with the images (default: the release's charts, from the checkout)")
	fs.BoolVar(&f.noCharts, "no-charts", false, "carry the images alone, without the charts")
}

// pushFlags shape what copy and load write to the mirror.
type pushFlags struct {
	to, packagePrefix             string
	dryRun, keepPath, noReferrers bool
	concurrency                   int
}

func (f *pushFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.to, "to", "", "destination registry and path prefix, e.g. mirror.example.org/cozystack (required)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "say what would be copied; copy nothing")
	fs.IntVar(&f.concurrency, "concurrency", 4, "images copied at once")
	fs.BoolVar(&f.noReferrers, "no-referrers", false, "copy the images alone, without signatures, attestations and SBOMs")
	fs.BoolVar(&f.keepPath, "keep-path", false, "keep the source repository path under --to (ghcr.io/cozystack/x → PREFIX/cozystack/x) instead of PREFIX/x")
	fs.StringVar(&f.packagePrefix, "package-prefix", mirror.PrefixOutOfTree, "name the printed Packages "+mirror.PrefixOutOfTree+".<component>, as deploy/cozystack/reserved-ips.yaml does, or "+
		mirror.PrefixInTree+".<component>, as Cozystack's own packages do")
}

// check refuses what the flags cannot do, before anything is copied.
func (f *pushFlags) check() error {
	if _, err := mirror.PackageValues(nil, f.packagePrefix); err != nil {
		return fmt.Errorf("--package-prefix: %w", err)
	}
	return nil
}

func (f *pushFlags) options(s streams, a mirror.Access) mirror.Options {
	return mirror.Options{Dest: f.to, DryRun: f.dryRun, Concurrency: f.concurrency, Progress: s.stderr, NoReferrers: f.noReferrers,
		KeepPath: f.keepPath, Access: a}
}

func copyCmd(s streams) *cobra.Command {
	var reg registryFlags
	var src sourceFlags
	var push pushFlags
	cmd := &cobra.Command{
		Use:   "copy --to REGISTRY/PREFIX [flags] [component=ref | name=oci://ref ...]",
		Short: "Copy the images and charts to a mirror registry, verify them, and print the Package values",
		RunE: func(cmd *cobra.Command, args []string) error {
			if push.to == "" {
				return errors.New("copy needs --to")
			}
			if err := push.check(); err != nil {
				return err
			}
			access, err := reg.access(s, push.to)
			if err != nil {
				return failure{err}
			}
			imgs, chs, err := artifacts(src, args)
			if err != nil {
				return failure{err}
			}
			opts := push.options(s, access)
			opts.Charts = chs
			results, err := mirror.Mirror(cmd.Context(), imgs, opts)
			return report(s, results, push, err)
		},
	}
	push.add(cmd.Flags())
	src.add(cmd.Flags())
	reg.add(cmd.Flags())
	return cmd
}

func saveCmd(s streams) *cobra.Command {
	var reg registryFlags
	var src sourceFlags
	var archive string
	var noReferrers bool
	cmd := &cobra.Command{
		Use:   "save --archive FILE [flags] [component=ref | name=oci://ref ...]",
		Short: "Save the images and charts into one archive (and its .sha256 checksum file) to carry to the mirror",
		RunE: func(cmd *cobra.Command, args []string) error {
			if archive == "" {
				return errors.New("save needs --archive")
			}
			access, err := reg.access(s, "")
			if err != nil {
				return failure{err}
			}
			imgs, chs, err := artifacts(src, args)
			if err != nil {
				return failure{err}
			}
			results, err := mirror.Save(cmd.Context(), imgs, archive,
				mirror.Options{Progress: s.stderr, NoReferrers: noReferrers, Access: access, Charts: chs})
			for _, r := range results {
				fmt.Fprintf(s.stderr, "%-20s %s: saved with %d attachments\n", label(r), r.Source, len(r.Attachments))
			}
			if len(results) > 0 {
				fmt.Fprintf(s.stderr, "saved to %s (checksum in %s); carry both and run: mirror load --archive %s --to REGISTRY/PREFIX\n",
					archive, mirror.ChecksumFile(archive), filepath.Base(archive))
			}
			if err != nil {
				return failure{fmt.Errorf("not saved:\n%w", err)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&archive, "archive", "", "archive file to write (required)")
	cmd.Flags().BoolVar(&noReferrers, "no-referrers", false, "save the images alone, without signatures, attestations and SBOMs")
	src.add(cmd.Flags())
	reg.add(cmd.Flags())
	return cmd
}

func loadCmd(s streams) *cobra.Command {
	var reg registryFlags
	var push pushFlags
	var archive string
	cmd := &cobra.Command{
		Use:   "load --archive FILE --to REGISTRY/PREFIX [flags]",
		Short: "Push what an archive made by save holds to a mirror registry, verify it, and print the Package values",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if archive == "" || push.to == "" {
				return errors.New("load needs --archive and --to")
			}
			if err := push.check(); err != nil {
				return err
			}
			access, err := reg.access(s, push.to)
			if err != nil {
				return failure{err}
			}
			results, err := mirror.Load(cmd.Context(), archive, push.options(s, access))
			return report(s, results, push, err)
		},
	}
	cmd.Flags().StringVar(&archive, "archive", "", "archive file written by save (required)")
	push.add(cmd.Flags())
	reg.add(cmd.Flags())
	return cmd
}

func platformsCmd(s streams) *cobra.Command {
	var reg registryFlags
	cmd := &cobra.Command{
		Use:   "platforms [flags] REPOSITORY@sha256:... ...",
		Short: "Print the digest reference of each platform image of the given images, one a line",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			access, err := reg.access(s, "")
			if err != nil {
				return failure{err}
			}
			for _, ref := range args {
				ps, err := mirror.Platforms(cmd.Context(), ref, access)
				if err != nil {
					return failure{err}
				}
				for _, p := range ps {
					fmt.Fprintln(s.stdout, p.Ref)
					fmt.Fprintf(s.stderr, "%s: %s %s\n", ref, p.Platform, p.Ref)
				}
			}
			return nil
		},
	}
	reg.add(cmd.Flags())
	return cmd
}

// report prints each result, then the Package values of those copied, and returns err as a
// failure.
func report(s streams, results []mirror.Result, push pushFlags, err error) error {
	dryRun := push.dryRun
	for _, r := range results {
		state := "verified (already there)"
		switch {
		case dryRun && !r.Copied:
			state = "would copy (dry run)"
		case r.Copied:
			state = "copied and verified"
		}
		fmt.Fprintf(s.stderr, "%-20s %s → %s: %s, %d attachments\n", label(r), r.Source, r.Dest, state, len(r.Attachments))
	}
	if !dryRun && len(results) > 0 {
		values, verr := mirror.PackageValues(results, push.packagePrefix)
		if verr != nil {
			return verr // checked before the copy
		}
		fmt.Fprint(s.stdout, "# Point the packages at the mirror:\n"+values)
	}
	if err != nil {
		return failure{fmt.Errorf("not copied:\n%w", err)}
	}
	return nil
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
// component=ref an image), else the checkout's; --charts replaces the charts, --no-charts drops them.
func artifacts(f sourceFlags, args []string) (imgs, chs map[string]string, err error) {
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
		packages := f.packages
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
		if f.chartList == "" && !f.noCharts {
			if chs, err = mirror.PackageCharts(filepath.Dir(packages)); err != nil {
				return nil, nil, fmt.Errorf("the release's charts (give --charts FILE, or --no-charts to leave them out): %w", err)
			}
		}
	}
	if f.chartList != "" {
		if chs, err = mirror.ReadChartList(f.chartList); err != nil {
			return nil, nil, err
		}
	}
	if f.noCharts {
		chs = nil
	}
	return imgs, chs, nil
}
