package mirrortest

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Proxy is a reverse proxy on loopback in front of a registry. It answers the requests that
// match a fault with the fault's status, a set number of times, and passes everything else on.
// It keeps the Host header, so the registry's upload locations point back at the proxy.
type Proxy struct {
	Host string // 127.0.0.1:port, what clients use as the registry

	mu     sync.Mutex
	faults []*fault
}

type fault struct {
	method, path string
	status       int
	left         int // answers still to inject; negative: always
	served       int
}

// StartProxy starts a proxy in front of target (a base URL such as http://127.0.0.1:5000); it
// is stopped when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Host = r.In.Host
	}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Host = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status := p.inject(r); status != 0 {
			http.Error(w, http.StatusText(status), status)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// Fail answers the requests whose path contains path (and whose method is method, unless it
// is empty) with status, times times (negative: every time). Faults added earlier match first.
func (p *Proxy) Fail(method, path string, status, times int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, &fault{method: method, path: path, status: status, left: times})
}

// Reset drops every fault.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = nil
}

// Injected is how many error answers the faults have given.
func (p *Proxy) Injected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, f := range p.faults {
		n += f.served
	}
	return n
}

func (p *Proxy) inject(r *http.Request) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		if f.left == 0 || !strings.Contains(r.URL.Path, f.path) || (f.method != "" && f.method != r.Method) {
			continue
		}
		if f.left > 0 {
			f.left--
		}
		f.served++
		return f.status
	}
	return 0
}
