package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
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
		if err := fetchProfile(ctx, r.s.Config, file, secs); err != nil {
			r.logf("%s: profiling kube-apiserver: %v", step, err)
			return
		}
		r.logf("%s: wrote a %d s CPU profile of kube-apiserver to %s (go tool pprof -top %s)", step, secs, file, file)
	}()
	return func() { close(stop); <-done }
}

func fetchProfile(ctx context.Context, cfg *rest.Config, file string, secs int) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+60)*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", cfg.Host, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
