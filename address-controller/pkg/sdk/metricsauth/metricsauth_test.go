package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
)

// counter counts the review requests that reach the apiserver, by resource.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		for _, res := range []string{"tokenreviews", "subjectaccessreviews"} {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/"+res) {
				c.mu.Lock()
				c.n[res]++
				c.mu.Unlock()
			}
		}
		return rt.RoundTrip(r)
	})
}

func (c *counter) get(res string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[res]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// clock is a settable now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// On a real apiserver (RBAC, service-account tokens): no token or another scheme is 401, a token
// the apiserver does not know 401, a ServiceAccount without get on /metrics 403, one bound to a
// ClusterRole granting it 200 (and 403 for another verb). Answers are cached for their TTLs: five
// scrapes cost one TokenReview and one SubjectAccessReview, an expired answer is asked again, and
// a revoked binding stops letting the reader in once its allowed answer expires.
func TestGuardAsksTheAPIServerAndCachesItsAnswers(t *testing.T) {
	cfg := envtestutil.Start(t, nil)
	ctx := context.Background()
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "scrapers"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("reader"), token("stranger")
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "reader"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	calls := &counter{n: map[string]int{}}
	counted := rest.CopyConfig(cfg)
	counted.Wrap(calls.wrap)
	httpClient, err := rest.HTTPClientFor(counted)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := Filter(counted, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		_, _ = io.WriteString(w, "metrics\n")
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// The same filter with a clock of the test's own, for the expiries.
	clk := &clock{t: time.Now()}
	authn, _ := kubernetes.NewForConfigAndClient(counted, httpClient)
	g := New(authn.AuthenticationV1().TokenReviews(), authn.AuthorizationV1().SubjectAccessReviews())
	g.now = clk.now
	timed := httptest.NewServer(g.Handler(logr.Discard(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(timed.Close)

	do := func(url, method, authorization string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url+"/metrics", nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		what, method, authorization string
		want                        int
	}{
		{"no token", http.MethodGet, "", http.StatusUnauthorized},
		{"basic authentication", http.MethodGet, "Basic cmVhZGVyOnNlY3JldA==", http.StatusUnauthorized},
		{"an empty bearer token", http.MethodGet, "Bearer  ", http.StatusUnauthorized},
		{"a token the apiserver does not know", http.MethodGet, "Bearer not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without the role", http.MethodGet, "Bearer " + stranger, http.StatusForbidden},
		{"the reader", http.MethodGet, "Bearer " + reader, http.StatusOK},
		{"the reader, scheme in lower case", http.MethodGet, "bearer " + reader, http.StatusOK},
		{"the reader, another verb", http.MethodPost, "Bearer " + reader, http.StatusForbidden},
	} {
		if got := do(srv.URL, c.method, c.authorization); got != c.want {
			t.Errorf("%s: status %d, want %d", c.what, got, c.want)
		}
	}
	if n := served.Load(); n != 2 {
		t.Errorf("the metrics handler served %d requests, want 2 (the reader's gets)", n)
	}

	// Caching: five more scrapes by the reader ask nothing.
	tr, sar := calls.get("tokenreviews"), calls.get("subjectaccessreviews")
	for range 5 {
		do(srv.URL, http.MethodGet, "Bearer "+reader)
	}
	if d := calls.get("tokenreviews") - tr; d != 0 {
		t.Errorf("cached tokens were reviewed again %d times", d)
	}
	if d := calls.get("subjectaccessreviews") - sar; d != 0 {
		t.Errorf("cached decisions were asked again %d times", d)
	}

	// Expiry, on the guard with the test's clock.
	reviews := func() (int, int) { return calls.get("tokenreviews"), calls.get("subjectaccessreviews") }
	tr, sar = reviews()
	if got := do(timed.URL, http.MethodGet, "Bearer "+reader); got != http.StatusOK {
		t.Fatalf("reader: %d", got)
	}
	if got := do(timed.URL, http.MethodGet, "Bearer "+stranger); got != http.StatusForbidden {
		t.Fatalf("stranger: %d", got)
	}
	if a, b := reviews(); a-tr != 2 || b-sar != 2 {
		t.Fatalf("first requests: %d token and %d access reviews, want 2 and 2", a-tr, b-sar)
	}
	// A token the apiserver rejects is kept too (on the test's clock, so the machine's speed does
	// not matter): five requests, one review.
	tr, sar = reviews()
	for range 5 {
		if got := do(timed.URL, http.MethodGet, "Bearer not-a-token"); got != http.StatusUnauthorized {
			t.Fatalf("unknown token: %d", got)
		}
	}
	if a, b := reviews(); a-tr != 1 || b-sar != 0 {
		t.Fatalf("five requests with an unknown token: %d token and %d access reviews, want 1 and 0", a-tr, b-sar)
	}
	// Past the token TTL and the denied TTL, within the allowed one: the tokens are reviewed
	// again, the stranger's decision is asked again, the reader's is not.
	clk.add(max(TokenTTL, DenyTTL) + time.Second)
	tr, sar = reviews()
	do(timed.URL, http.MethodGet, "Bearer "+reader)
	do(timed.URL, http.MethodGet, "Bearer "+stranger)
	if a, b := reviews(); a-tr != 2 || b-sar != 1 {
		t.Fatalf("after %s: %d token and %d access reviews, want 2 and 1", max(TokenTTL, DenyTTL)+time.Second, a-tr, b-sar)
	}
	// A revoked binding: the reader keeps the cached answer until it expires, then is refused.
	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "metrics-reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := do(timed.URL, http.MethodGet, "Bearer "+reader); got != http.StatusOK {
		t.Errorf("within the allowed TTL after the binding was deleted: %d, want 200 (cached)", got)
	}
	clk.add(AllowTTL)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := do(timed.URL, http.MethodGet, "Bearer "+reader)
		if got == http.StatusForbidden {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader whose binding was deleted still gets %d past the allowed TTL", got)
		}
		// The apiserver's RBAC authorizer sees the deletion through its own informer; the
		// denied answer must not have been cached as allowed in the meantime.
		clk.add(AllowTTL)
		time.Sleep(200 * time.Millisecond)
	}
}

// The caches stay bounded: expired answers go (at most every PruneEvery), and past MaxEntries no
// answer is kept.
func TestCachesStayBounded(t *testing.T) {
	now := time.Now()
	m := map[int]time.Time{}
	for i := range 100 {
		m[i] = now.Add(time.Duration(i-50)*time.Second + time.Millisecond) // half expired
	}
	prune(m, now, func(t time.Time) time.Time { return t })
	if len(m) != 50 {
		t.Fatalf("%d entries left, want the 50 that have not expired", len(m))
	}

	clk := &clock{t: now}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: tr.Spec.Token}}
		return true, tr, nil
	})
	g := New(cs.AuthenticationV1().TokenReviews(), cs.AuthorizationV1().SubjectAccessReviews())
	g.now = clk.now
	ctx := context.Background()
	for i := range MaxEntries + 10 {
		if _, err := g.Authenticate(ctx, fmt.Sprint("token-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.users) != MaxEntries {
		t.Fatalf("%d tokens kept, want at most %d", len(g.users), MaxEntries)
	}
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	for i := range MaxEntries + 10 {
		if _, _, err := g.Authorize(ctx, &User{Name: "scraper"}, "get", fmt.Sprint("/path-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.decisions) != MaxEntries {
		t.Fatalf("%d decisions kept, want at most %d", len(g.decisions), MaxEntries)
	}
	clk.add(TokenTTL + PruneEvery)
	if _, err := g.Authenticate(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	if len(g.users) != 1 {
		t.Fatalf("%d tokens kept after they all expired, want only the fresh one", len(g.users))
	}

	// A full cache still renews an answer it keeps: a scraper whose token expired between two
	// prunes is reviewed once, not at every request until the next prune.
	reviews := 0
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		return false, nil, nil // on to the reactor above, which answers
	})
	clk.add(TokenTTL - PruneEvery/2) // "fresh" expires PruneEvery/2 from now
	for i := range MaxEntries - 1 {
		if _, err := g.Authenticate(ctx, fmt.Sprint("later-", i)); err != nil { // prunes nothing
			t.Fatal(err)
		}
	}
	if len(g.users) != MaxEntries {
		t.Fatalf("%d tokens kept, want a full cache (%d)", len(g.users), MaxEntries)
	}
	clk.add(PruneEvery/2 + time.Second) // "fresh" expired; the last prune was less than PruneEvery ago
	if _, err := g.Authenticate(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	reviews = 0
	if _, err := g.Authenticate(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	if reviews != 0 {
		t.Fatalf("the renewed answer of a full cache was not kept: %d more TokenReviews", reviews)
	}
}

// An answer the apiserver could not give is never kept: a token or access review that failed
// (after its retries) is a 500 for that request, and the next request asks again and is let in. A rejected token is
// kept only RejectedTTL.
func TestFailedReviewsAreNotKept(t *testing.T) {
	saved := retry
	retry.Duration, retry.Steps = time.Millisecond, 2
	t.Cleanup(func() { retry = saved })
	var failing atomic.Bool
	var tokenReviews, accessReviews atomic.Int32
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tokenReviews.Add(1)
		if failing.Load() {
			return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if tr.Spec.Token == "good" || tr.Spec.Token == "other" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: tr.Spec.Token + "-scraper"}}
		} else {
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	var failingAccess atomic.Bool
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		accessReviews.Add(1)
		if failingAccess.Load() {
			return true, nil, apierrors.NewInternalError(errors.New("authorizer webhook down"))
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	clk := &clock{t: time.Now()}
	g := New(cs.AuthenticationV1().TokenReviews(), cs.AuthorizationV1().SubjectAccessReviews())
	g.now = clk.now
	srv := httptest.NewServer(g.Handler(logr.Discard(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(srv.Close)
	get := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// failThenRecover: while fail is set a request with token is a 500 after want reviews in all
	// (count), and once it is cleared the next request is let in (the failure was not kept).
	failThenRecover := func(what string, fail *atomic.Bool, count *atomic.Int32, want int32, token string) {
		t.Helper()
		fail.Store(true)
		if got := get(token); got != http.StatusInternalServerError {
			t.Fatalf("while %s fails: %d, want 500", what, got)
		}
		if n := count.Load(); n != want {
			t.Errorf("%s: %d reviews in all, want %d (a first try and two retries on top of earlier ones)", what, n, want)
		}
		fail.Store(false)
		if got := get(token); got != http.StatusOK {
			t.Fatalf("once %s answers: %d, want 200 (the failure was not kept)", what, got)
		}
	}
	failThenRecover("authentication", &failing, &tokenReviews, 3, "good")
	// A rejected token: 401, kept for RejectedTTL, then asked again.
	before := tokenReviews.Load()
	for range 3 {
		if got := get("bad"); got != http.StatusUnauthorized {
			t.Fatalf("bad token: %d, want 401", got)
		}
	}
	if n := tokenReviews.Load() - before; n != 1 {
		t.Errorf("%d TokenReviews for three requests with the same bad token, want 1", n)
	}
	clk.add(RejectedTTL)
	get("bad")
	if n := tokenReviews.Load() - before; n != 2 {
		t.Errorf("after RejectedTTL: %d TokenReviews in all, want 2", n)
	}
	if n := accessReviews.Load(); n != 1 {
		t.Errorf("%d SubjectAccessReviews, want 1", n)
	}
	// A SubjectAccessReview that fails is not kept either: one review before, then three.
	failThenRecover("authorization", &failingAccess, &accessReviews, 4, "other")
}

// decisionKey tells apart every field a SubjectAccessReview is asked about, whatever the order
// of groups and extras.
func TestDecisionKey(t *testing.T) {
	base := &User{Name: "a", UID: "u", Groups: []string{"g1", "g2"}, Extra: map[string][]string{"k": {"v"}, "l": {"w"}}}
	same := &User{Name: "a", UID: "u", Groups: []string{"g2", "g1"}, Extra: map[string][]string{"l": {"w"}, "k": {"v"}}}
	if decisionKey(base, "get", "/metrics") != decisionKey(same, "get", "/metrics") {
		t.Error("the order of groups or extras changed the key")
	}
	for name, u := range map[string]*User{
		"name":   {Name: "b", UID: "u", Groups: base.Groups, Extra: base.Extra},
		"uid":    {Name: "a", UID: "v", Groups: base.Groups, Extra: base.Extra},
		"groups": {Name: "a", UID: "u", Groups: []string{"g1"}, Extra: base.Extra},
		"extra":  {Name: "a", UID: "u", Groups: base.Groups, Extra: map[string][]string{"k": {"v", "x"}, "l": {"w"}}},
		"split":  {Name: "a|", UID: "u", Groups: base.Groups, Extra: base.Extra},
	} {
		if decisionKey(u, "get", "/metrics") == decisionKey(base, "get", "/metrics") {
			t.Errorf("a different %s gave the same key", name)
		}
	}
	if decisionKey(base, "post", "/metrics") == decisionKey(base, "get", "/metrics") || decisionKey(base, "get", "/x") == decisionKey(base, "get", "/metrics") {
		t.Error("verb or path not in the key")
	}
}
