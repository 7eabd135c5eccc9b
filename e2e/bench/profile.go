package bench

import (
	"cmp"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
)

// DefaultProfileSeconds is how long each step's CPU profile of kube-apiserver lasts by default.
const DefaultProfileSeconds = 30

// profilingArgs turn kube-apiserver's profiling endpoint back on (the control plane runs it
// with --profiling=false; a later flag wins).
var profilingArgs = []string{"--profiling=true"}

// profileAPIServer takes one CPU profile of kube-apiserver once a third of a step's objects
// are done (the step is in full swing then, past its first creates), and writes it to
// dir/apiserver-<step>.pprof. It returns at once; the profile is written in the background.
// wait ends it: a profile not started yet (the step failed or ended early) is not taken, one
// being taken is waited for.
func (r *runner) profileAPIServer(ctx context.Context, step string, tr *stepTrack, n int) (wait func()) {
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for tr.count()*3 < n {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-t.C:
			}
		}
		file := filepath.Join(r.cfg.ProfileDir, "apiserver-"+step+".pprof")
		secs := cmp.Or(r.cfg.ProfileSeconds, DefaultProfileSeconds)
		if err := fetchProfile(ctx, r.s.Client, file, secs); err != nil {
			r.logf("%s: profiling kube-apiserver: %v", step, err)
			return
		}
		r.logf("%s: wrote a %d s CPU profile of kube-apiserver to %s (go tool pprof -top %s)", step, secs, file, file)
	}()
	return func() { close(stop); <-done }
}

// fetchProfile asks kube-apiserver's profiling endpoint for a CPU profile of secs seconds,
// through the admin client, and writes it to file.
func fetchProfile(ctx context.Context, cs kubernetes.Interface, file string, secs int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+60)*time.Second)
	defer cancel()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(secs)).Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
