package binaries

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Builder builds components from their pin modules.
type Builder struct {
	// PinsDir holds one pin module per component (tools/binaries in the checkout).
	PinsDir string
	// Progress receives one line per step and a heartbeat during long compiles.
	Progress io.Writer
	// Heartbeat is the interval of "still building" lines; 30s when zero.
	Heartbeat time.Duration
	// Go is the go command; "go" when empty.
	Go string
}

// Ensure builds the component unless the cache already holds it, built as the code now
// declares (its record): a cached build made another way (other linker flags, another Go, pin
// module or target, or before builds were recorded) is built again in its place.
func (b *Builder) Ensure(c Component) error {
	why, err := b.stale(c)
	if err != nil {
		return err
	}
	if why == "" {
		dir, _ := c.Dir()
		b.say("[%s %s] cached in %s", c.Name, c.Version, dir)
		return nil
	}
	root, err := CacheRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("creating the binary cache %s: %w", root, err)
	}
	unlock, err := lockFile(filepath.Join(root, c.Name+".lock"))
	if err != nil {
		return fmt.Errorf("locking the cache for %s: %w", c.Name, err)
	}
	defer unlock()
	if why, err = b.stale(c); err != nil {
		return err
	}
	if why == "" { // another process finished it while we waited for the lock
		b.say("[%s %s] built by another process", c.Name, c.Version)
		return nil
	}
	if c.Built() {
		b.say("[%s %s] the cached build %s: building it again", c.Name, c.Version, why)
	}
	if err := b.build(c); err != nil {
		return fmt.Errorf("building %s %s: %w", c.Name, c.Version, err)
	}
	return nil
}

// stale says why the cache does not hold the component as it is now built ("" when it does).
func (b *Builder) stale(c Component) (string, error) {
	if !c.Built() {
		return "is missing", nil
	}
	dir, err := c.Dir()
	if err != nil {
		return "", err
	}
	for _, f := range append(append([]string{}, c.Commands...), slices.Sorted(maps.Values(c.Files))...) {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "lacks " + f, nil
		}
	}
	want, err := b.record(c, filepath.Join(b.PinsDir, c.PinDir()))
	if err != nil {
		return "", err
	}
	have, err := os.ReadFile(filepath.Join(dir, buildRecord))
	if errors.Is(err, fs.ErrNotExist) {
		return "was made before builds were recorded", nil
	}
	if err != nil {
		return "", err
	}
	if !bytes.Equal(have, want) {
		return "was made another way (" + recordDiff(have, want) + ")", nil
	}
	return "", nil
}

// recordDiff quotes the first line of two build records that differs, as it was and as it is now.
func recordDiff(have, want []byte) string {
	h, w := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		var a, b string
		if i < len(h) {
			a = h[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("%q, now %q", a, b)
		}
	}
	return "records differ"
}

func (b *Builder) build(c Component) error {
	pin := filepath.Join(b.PinsDir, c.PinDir())
	if err := b.checkPin(c, pin); err != nil {
		return err
	}
	final, err := c.Dir()
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.partial-%d", final, os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	start := time.Now()
	// A patched build compiles a patched copy of the module's source, in a copy of the pin
	// module that replaces the module with it: the same dependencies and Go settings (its
	// go.mod's go line sets the GODEBUG defaults) as the unpatched build.
	buildDir, modDir := pin, ""
	if len(c.Patches) > 0 {
		work := fmt.Sprintf("%s.pin-%d", final, os.Getpid())
		if err := os.RemoveAll(work); err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if err := CopyTree(pin, work); err != nil {
			return fmt.Errorf("copying the pin module: %w", err)
		}
		// Inside the copy (a directory with a go.mod of its own is not part of it), under a
		// relative path: the binary records the replacement, and the same patches make the
		// same binary.
		const source = "patched-source"
		if err := b.source(c, pin, filepath.Join(work, source), false); err != nil {
			return err
		}
		if out, err := b.run(work, "", "mod", "edit", "-replace", c.Module+"=./"+source); err != nil {
			return fmt.Errorf("replacing %s with its patched source: %w\n%s", c.Module, err, tail(out, 20))
		}
		buildDir, modDir = work, filepath.Join(work, source)
	}
	record, err := b.record(c, pin)
	if err != nil {
		return err
	}
	if err := b.compile(c, record, buildDir, tmp); err != nil {
		return err
	}
	if len(c.Files) > 0 {
		if modDir == "" {
			var err error
			if modDir, err = b.moduleDir(pin, c); err != nil {
				return err
			}
		}
		for src, dst := range c.Files {
			b.say("[%s %s] copying %s", c.Name, c.Version, src)
			if err := CopyTree(filepath.Join(modDir, src), filepath.Join(tmp, dst)); err != nil {
				return fmt.Errorf("copying %s from %s: %w", src, c.Module, err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, buildRecord), record, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, doneMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	// A build made another way is moved aside, not removed first: a reader finds the old build
	// or the new one (nothing only between the two renames), and a running command is unharmed.
	old := fmt.Sprintf("%s.old-%d", final, os.Getpid())
	if err := os.Rename(final, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	defer os.RemoveAll(old)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	b.say("[%s %s] done in %s: %s", c.Name, c.Version, time.Since(start).Round(time.Second), final)
	return nil
}

// compile writes the component's commands into dir: those its Base holds, built as this build
// is (record), are copied from Base's cache; the rest come from one go build, so that the go
// command links one command while it compiles another's packages.
func (b *Builder) compile(c Component, record []byte, buildDir, dir string) error {
	// The cache key is the version alone, so the base's directory may hold a build made under
	// flags, a Go or a pin module the code no longer declares: what it was built with is read
	// from its record, and a base without one (or with another) is not copied.
	copyBase := false
	if c.Base != nil && SameBuild(c, *c.Base) && c.Base.Built() {
		if baseDir, err := c.Base.Dir(); err == nil {
			baseRecord, err := os.ReadFile(filepath.Join(baseDir, buildRecord))
			copyBase = err == nil && bytes.Equal(baseRecord, record)
			if !copyBase {
				b.say("[%s %s] %s's cache was built another way (or before builds were recorded): not copied", c.Name, c.Version, c.Base.Name)
			}
		}
	}
	var pkgs, cmds []string
	for i, pkg := range c.Packages {
		cmd := c.Commands[i]
		if copyBase {
			if src, err := c.Base.Path(cmd); err == nil {
				b.say("[%s %s] %s: built as %s's is, copied from its cache", c.Name, c.Version, cmd, c.Base.Name)
				if err := copyFile(src, filepath.Join(dir, cmd)); err != nil {
					return err
				}
				continue
			}
		}
		pkgs, cmds = append(pkgs, pkg), append(cmds, cmd)
	}
	if len(pkgs) == 0 {
		return nil
	}
	names := strings.Join(cmds, ", ")
	b.say("[%s %s] compiling %s", c.Name, c.Version, names)
	// The go command names each command after its package path (goCommandName) in the -o
	// directory; they are renamed to the component's names after.
	out := filepath.Join(dir, ".go-build")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w " + c.LDFlags), "-o", out + string(filepath.Separator)}, pkgs...)
	if o, err := b.runEnv(buildDir, c.Env, fmt.Sprintf("[%s %s] still compiling %s", c.Name, c.Version, names), args...); err != nil {
		return fmt.Errorf("go build %s failed: %w\n%s", strings.Join(pkgs, " "), err, tail(o, 40))
	}
	for i, pkg := range pkgs {
		if err := os.Rename(filepath.Join(out, goCommandName(pkg)), filepath.Join(dir, cmds[i])); err != nil {
			return fmt.Errorf("go build %s: %w", pkg, err)
		}
	}
	return os.Remove(out)
}

// buildRecord is written beside doneMarker: how the commands in the directory were built
// (record), which a component copying them compares with its own build.
const buildRecord = ".build"

// record describes how the component's commands are built, beyond its cache key: module,
// version, patches, linker flags, the go command's version and settings (cgo, target) and the
// pin module's go.mod and go.sum. Two builds with equal records make the same commands.
func (b *Builder) record(c Component, pin string) ([]byte, error) {
	// The go command's settings as the build sees them (runEnv's and the component's over the
	// caller's environment).
	settings, err := b.runEnv(pin, c.Env, "", "env", "GOVERSION", "CGO_ENABLED", "GOOS", "GOARCH", "GOAMD64", "GOARM64", "GOEXPERIMENT")
	if err != nil {
		return nil, fmt.Errorf("asking the go command its settings: %w\n%s", err, tail(settings, 10))
	}
	var r strings.Builder
	fmt.Fprintf(&r, "module %s\nversion %s\npatches %s\nldflags %s\nenv %s\ngo env %s\n",
		c.Module, c.Version, c.PatchesDigest(), c.LDFlags, strings.Join(c.Env, " "), strings.Join(strings.Fields(string(settings)), " "))
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(pin, f))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		fmt.Fprintf(&r, "%s %x\n", f, sha256.Sum256(data))
	}
	return []byte(r.String()), nil
}

// goCommandName is the file name go build gives the command of package path pkg: its last
// element, or the one before when that is a major version (v2, v3, …; not v0 or v1).
func goCommandName(pkg string) string {
	dir, name := path.Split(pkg)
	if dir != "" && len(name) >= 2 && name[0] == 'v' && name[1] != '0' && name != "v1" &&
		strings.Trim(name[1:], "0123456789") == "" {
		return path.Base(dir)
	}
	return name
}

// checkPin fails when the pin module requires another version than the code expects, so the
// cache key can never lie about what was built.
func (b *Builder) checkPin(c Component, pin string) error {
	if _, err := os.Stat(filepath.Join(pin, "go.mod")); err != nil {
		if c.Pin != "" {
			// A component pinned at several versions: say which ones exist.
			known, _ := filepath.Glob(filepath.Join(filepath.Dir(pin), "*", "go.mod"))
			var versions []string
			for _, k := range known {
				versions = append(versions, filepath.Base(filepath.Dir(k)))
			}
			return fmt.Errorf("no pin module for %s %s (%s missing; pinned versions: %s): add one, a go.mod requiring %s %s, and list it in the code",
				c.Name, c.Version, pin, strings.Join(versions, ", "), c.Module, c.PinnedVersion())
		}
		return fmt.Errorf("pin module %s not found (run from the checkout, or pass -pins): %w", pin, err)
	}
	out, err := b.run(pin, "", "list", "-m", "-f", "{{.Version}}", c.Module)
	if err != nil {
		return fmt.Errorf("reading the pinned version of %s: %w\n%s", c.Module, err, tail(out, 20))
	}
	if got := strings.TrimSpace(string(out)); got != c.PinnedVersion() {
		return fmt.Errorf("pin module %s requires %s %s, but the code expects %s", pin, c.Module, got, c.PinnedVersion())
	}
	return nil
}

// Source writes the module's source with the component's patches applied into dir (absent or
// empty): what a patched build compiles, for running the module's own tests on it. Its test
// patches are applied after them; they may change only tests, so the code under test is the
// code a build compiles.
func (b *Builder) Source(c Component, dir string) error {
	pin := filepath.Join(b.PinsDir, c.PinDir())
	if err := b.checkPin(c, pin); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty", dir)
	}
	return b.source(c, pin, dir, true)
}

// source copies the module's source into dir and applies its patches, and its test patches
// when withTests.
func (b *Builder) source(c Component, pin, dir string, withTests bool) error {
	testPatches := c.TestPatches
	if !withTests {
		testPatches = nil
	}
	// Each one alone, to name it, then all of them joined, as ApplyPatches applies them: git
	// skips text before a patch's first header, so the end of one patch and the start of the
	// next can make a file's diff that neither makes alone.
	for _, p := range testPatches {
		if err := onlyTests([]Patch{p}); err != nil {
			return fmt.Errorf("test patch %s: %w", p.Name, err)
		}
	}
	if len(testPatches) > 1 {
		if err := onlyTests(testPatches); err != nil {
			return fmt.Errorf("the test patches joined: %w", err)
		}
	}
	modDir, err := b.moduleDir(pin, c)
	if err != nil {
		return err
	}
	b.say("[%s %s] copying the source of %s %s", c.Name, c.Version, c.Module, c.PinnedVersion())
	if err := CopyTree(modDir, dir); err != nil {
		return fmt.Errorf("copying the source of %s: %w", c.Module, err)
	}
	for _, set := range []struct {
		what    string
		patches []Patch
	}{{"patches", c.Patches}, {"test patches", testPatches}} {
		if len(set.patches) == 0 {
			continue
		}
		names := make([]string, len(set.patches))
		for i, p := range set.patches {
			names[i] = p.Name
		}
		b.say("[%s %s] applying %s", c.Name, c.Version, strings.Join(names, ", "))
		if err := ApplyPatches(dir, set.patches); err != nil {
			return fmt.Errorf("applying the %s to %s %s: %w", set.what, c.Module, c.PinnedVersion(), err)
		}
	}
	return nil
}

// onlyTests says why patches are not a test patch: they change a file that is not a test (only
// files ending in _test.go may be changed), rename or copy one, or are not a patch git reads.
func onlyTests(patches []Patch) error {
	files, moved, err := PatchedFiles(patches)
	switch {
	case err != nil:
		return err
	case len(moved) > 0:
		return fmt.Errorf("%s: a test patch may not rename or copy files", strings.Join(moved, "; "))
	}
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			return fmt.Errorf("changes %s, which is not a test: only files ending in _test.go may be changed by a test patch", f)
		}
	}
	return nil
}

// PatchedFiles lists the files the patches, applied in order as ApplyPatches applies them, would
// write, as git apply itself reads them (--numstat: the names after the change), and the
// renames and copies among them (--summary), whose sources --numstat does not name.
func PatchedFiles(patches []Patch) (files, moved []string, err error) {
	dir, err := os.MkdirTemp("", "patched-files-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	input := joinPatches(patches)
	out, err := gitApply(dir, input, "--numstat", "-z")
	if err != nil {
		return nil, nil, fmt.Errorf("git apply cannot read it: %w: %s", err, strings.TrimSpace(tail(out, 5)))
	}
	// Each entry is "ADDED\tDELETED\tPATH" (git apply names a renamed or copied file by its new
	// name only).
	for _, entry := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		fields := strings.SplitN(entry, "\t", 3)
		if len(fields) != 3 || fields[2] == "" {
			return nil, nil, fmt.Errorf("git apply --numstat printed %q", entry)
		}
		files = append(files, fields[2])
	}
	out, err = gitApply(dir, input, "--summary")
	if err != nil {
		return nil, nil, fmt.Errorf("git apply cannot read it: %w: %s", err, strings.TrimSpace(tail(out, 5)))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "rename ") || strings.HasPrefix(line, "copy ") {
			moved = append(moved, line)
		}
	}
	return files, moved, nil
}

// ApplyPatches applies the patches to the tree at dir, in order and all or none, with git
// apply (so a patched build needs git). dir is treated as a plain tree even inside a git work
// tree.
func ApplyPatches(dir string, patches []Patch) error {
	if len(patches) == 0 {
		return nil
	}
	// One input: git apply checks each input it is given before writing it, but writes one
	// before checking the next.
	if out, err := gitApply(dir, joinPatches(patches)); err != nil {
		return fmt.Errorf("git apply failed (nothing applied): %w\n%s", err, tail(out, 40))
	}
	return nil
}

// joinPatches is the patches as one input, each ending in a newline.
func joinPatches(patches []Patch) []byte {
	var all bytes.Buffer
	for _, p := range patches {
		all.Write(p.Data)
		if !bytes.HasSuffix(p.Data, []byte("\n")) {
			all.WriteByte('\n')
		}
	}
	return all.Bytes()
}

// gitApply runs git apply with args on input in dir, as a plain tree even inside a git work
// tree, and returns what it printed (standard output alone when it succeeds).
func gitApply(dir string, input []byte, args ...string) ([]byte, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("applying patches needs git: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(git, append(append([]string{"apply"}, args...), "-")...)
	cmd.Dir = abs
	cmd.Stdin = bytes.NewReader(input)
	// Inside a work tree, git apply would take the paths from its top and skip those outside
	// dir: stop the search for a repository at dir.
	cmd.Env = append(withoutGitEnv(os.Environ()), "GIT_CEILING_DIRECTORIES="+filepath.Dir(abs))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return append(stdout.Bytes(), stderr.Bytes()...), err
	}
	return stdout.Bytes(), nil
}

// withoutGitEnv drops the variables that point git at a repository.
func withoutGitEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name == "GIT_DIR" || name == "GIT_WORK_TREE" || name == "GIT_INDEX_FILE" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (b *Builder) moduleDir(pin string, c Component) (string, error) {
	out, err := b.run(pin, "", "mod", "download", "-json", c.Module+"@"+c.PinnedVersion())
	if err != nil {
		return "", fmt.Errorf("downloading %s: %w\n%s", c.Module, err, tail(out, 20))
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("locating %s in the module cache: %v", c.Module, err)
	}
	return info.Dir, nil
}

// run executes the go command in dir, outside any workspace, printing a heartbeat while it runs.
func (b *Builder) run(dir, heartbeat string, args ...string) ([]byte, error) {
	return b.runEnv(dir, nil, heartbeat, args...)
}

// runEnv is run with env added to the go command's environment.
func (b *Builder) runEnv(dir string, env []string, heartbeat string, args ...string) ([]byte, error) {
	goCmd := b.Go
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, args...)
	cmd.Dir = dir
	// Whatever the caller exports, a component is built static, for the machine its cache key
	// names and at the default instruction set level, so that every caller on a machine (make,
	// go run, a test binary) builds the same record and one cached build serves them all; the
	// component's Env may set cgo (never the target: the key names runtime's).
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false",
		"CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH, "GOAMD64=", "GOARM64=", "GOEXPERIMENT="), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	every := b.Heartbeat
	if every == 0 {
		every = 30 * time.Second
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	start := time.Now()
	for {
		select {
		case err := <-done:
			return out.Bytes(), err
		case <-ticker.C:
			if heartbeat != "" {
				b.say("%s (%s)", heartbeat, time.Since(start).Round(time.Second))
			}
		}
	}
}

func (b *Builder) say(format string, args ...any) {
	if b.Progress != nil {
		fmt.Fprintf(b.Progress, format+"\n", args...)
	}
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// CopyTree copies the directory src, files and folders, to dst (files with mode 0644).
func CopyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// copyFile copies the command src to dst (mode 0755).
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

func tail(out []byte, lines int) string {
	parts := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
