// Package metricsauth guards a controller's metrics endpoint the way the apiserver guards its
// own non-resource paths: the caller's bearer token is checked with a TokenReview, and the user it
// names must be allowed the request's verb on its path by a SubjectAccessReview (RBAC:
// nonResourceURLs ["/metrics"], verbs ["get"]).
//
// It does what controller-runtime's metrics/filters does, without that package's dependency on
// k8s.io/apiserver, which brings CEL, gRPC and OpenTelemetry into the binary: tens of megabytes a
// controller would map and partly touch only to check a token. Answers are cached with the TTLs
// controller-runtime gives the apiserver's delegating authenticator and authorizer (a valid token
// one minute, an allowed decision five minutes, a denied one thirty seconds), so a scraper every
// few seconds costs the apiserver one review a minute. A rejected token is kept for ten seconds
// only (the delegating authenticator keeps it the full minute): a scraper with a bad token costs a
// review per ten seconds, and one rejected by a passing authenticator failure is let in again soon
// after. An answer the apiserver could not give (an error) is never kept, and the caches are
// bounded: past MaxEntries a new answer is not kept, a renewed one replaces the old.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long answers are kept, and how many at most (past that, new answers are not kept until
// expired ones are dropped, which happens at most every PruneEvery; a renewed one still is).
const (
	TokenTTL    = time.Minute
	RejectedTTL = 10 * time.Second
	AllowTTL    = 5 * time.Minute
	DenyTTL     = 30 * time.Second
	MaxEntries  = 4096
	PruneEvery  = 10 * time.Second
)

// ReviewTimeout bounds each review request; a failed one is retried with this backoff (about 4s
// in all), within the scrape's own deadline.
var (
	ReviewTimeout = 10 * time.Second
	retry         = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 4}
)

// Filter is a metricsserver.FilterProvider: the metrics server's handler behind authentication and
// authorization by the apiserver of config.
func Filter(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authnclient.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authzclient.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	g := New(authn.TokenReviews(), authz.SubjectAccessReviews())
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return g.Handler(log, next), nil
	}, nil
}

// Guard reviews requests and caches the answers.
type Guard struct {
	tokens authnclient.TokenReviewInterface
	access authzclient.SubjectAccessReviewInterface
	now    func() time.Time

	mu         sync.Mutex
	users      map[[sha256.Size]byte]userEntry
	decisions  map[string]decisionEntry
	lastPruned time.Time
}

// User is who a token belongs to, as the TokenReview said.
type User struct {
	Name, UID string
	Groups    []string
	Extra     map[string][]string
}

type userEntry struct {
	user    *User // nil: the token is not valid
	expires time.Time
}

type decisionEntry struct {
	allowed bool
	reason  string
	expires time.Time
}

// New is a Guard over the given review clients.
func New(tokens authnclient.TokenReviewInterface, access authzclient.SubjectAccessReviewInterface) *Guard {
	return &Guard{tokens: tokens, access: access, now: time.Now,
		users: map[[sha256.Size]byte]userEntry{}, decisions: map[string]decisionEntry{}}
}

// Handler serves next to requests whose token is valid and whose user may use the method on the
// path: 401 without a valid bearer token, 403 when the user is not allowed, 500 when the apiserver
// could not be asked.
func (g *Guard) Handler(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearer(req)
		if !ok {
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		user, err := g.Authenticate(req.Context(), token)
		if err != nil {
			log.Error(err, "Authenticating a metrics request failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			log.V(4).Info("Metrics request with a token that is not valid")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb, path := strings.ToLower(req.Method), req.URL.Path
		allowed, reason, err := g.Authorize(req.Context(), user, verb, path)
		if err != nil {
			log.Error(err, "Authorizing a metrics request failed", "user", user.Name)
			http.Error(w, fmt.Sprintf("Authorization for user %s failed", user.Name), http.StatusInternalServerError)
			return
		}
		if !allowed {
			log.V(4).Info("Metrics request denied", "user", user.Name, "verb", verb, "path", path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %s may not %s %s", user.Name, verb, path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// bearer is the request's bearer token ("Authorization: Bearer <token>", the scheme in any case).
func bearer(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Authenticate is the user of token, nil if the apiserver does not accept it.
func (g *Guard) Authenticate(ctx context.Context, token string) (*User, error) {
	key := sha256.Sum256([]byte(token))
	g.mu.Lock()
	e, ok := g.users[key]
	g.mu.Unlock()
	if ok && g.now().Before(e.expires) {
		return e.user, nil
	}
	var status authnv1.TokenReviewStatus
	err := g.review(ctx, func(ctx context.Context) error {
		r, err := g.tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err == nil {
			status = r.Status
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *User
	if status.Authenticated {
		user = &User{Name: status.User.Username, UID: status.User.UID, Groups: status.User.Groups}
		if len(status.User.Extra) > 0 {
			user.Extra = map[string][]string{}
			for k, v := range status.User.Extra {
				user.Extra[k] = v
			}
		}
	}
	ttl := RejectedTTL
	if user != nil {
		ttl = TokenTTL
	}
	g.mu.Lock()
	g.pruneLocked()
	if _, kept := g.users[key]; kept || len(g.users) < MaxEntries {
		g.users[key] = userEntry{user: user, expires: g.now().Add(ttl)}
	}
	g.mu.Unlock()
	return user, nil
}

// Authorize says whether user may use verb on the non-resource path, and the apiserver's reason.
func (g *Guard) Authorize(ctx context.Context, user *User, verb, path string) (bool, string, error) {
	key := decisionKey(user, verb, path)
	g.mu.Lock()
	e, ok := g.decisions[key]
	g.mu.Unlock()
	if ok && g.now().Before(e.expires) {
		return e.allowed, e.reason, nil
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Name, UID: user.UID, Groups: user.Groups,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	if len(user.Extra) > 0 {
		sar.Spec.Extra = map[string]authzv1.ExtraValue{}
		for k, v := range user.Extra {
			sar.Spec.Extra[k] = v
		}
	}
	var status authzv1.SubjectAccessReviewStatus
	err := g.review(ctx, func(ctx context.Context) error {
		r, err := g.access.Create(ctx, sar, metav1.CreateOptions{})
		if err == nil {
			status = r.Status
		}
		return err
	})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	allowed := status.Allowed && !status.Denied
	reason := status.Reason
	if status.EvaluationError != "" {
		reason = strings.TrimSpace(reason + " (evaluation error: " + status.EvaluationError + ")")
	}
	ttl := DenyTTL
	if allowed {
		ttl = AllowTTL
	}
	g.mu.Lock()
	g.pruneLocked()
	if _, kept := g.decisions[key]; kept || len(g.decisions) < MaxEntries {
		g.decisions[key] = decisionEntry{allowed: allowed, reason: reason, expires: g.now().Add(ttl)}
	}
	g.mu.Unlock()
	return allowed, reason, nil
}

// review runs one review call, retried while the apiserver cannot answer (not when it answers
// that the request is wrong or not allowed: the controller's own RBAC is then missing).
func (g *Guard) review(ctx context.Context, call func(context.Context) error) error {
	var last error
	b := retry
	for {
		rctx, cancel := context.WithTimeout(ctx, ReviewTimeout)
		last = call(rctx)
		cancel()
		if last == nil || !retriable(last) || b.Steps <= 0 || ctx.Err() != nil {
			return last
		}
		select {
		case <-ctx.Done():
			return errors.Join(last, ctx.Err())
		case <-time.After(b.Step()):
		}
	}
}

func retriable(err error) bool {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		code := s.Status().Code
		return code == 0 || code == http.StatusTooManyRequests || code >= 500
	}
	return true // a network error
}

// decisionKey identifies a decision: everything the SubjectAccessReview is asked about.
func decisionKey(u *User, verb, path string) string {
	var b strings.Builder
	for _, s := range []string{u.Name, u.UID, verb, path} {
		fmt.Fprintf(&b, "%d:%s|", len(s), s)
	}
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	for _, s := range groups {
		fmt.Fprintf(&b, "g%d:%s|", len(s), s)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "e%d:%s=", len(k), k)
		for _, v := range u.Extra[k] {
			fmt.Fprintf(&b, "%d:%s,", len(v), v)
		}
		b.WriteByte('|')
	}
	return b.String()
}

// pruneLocked drops expired answers, at most every PruneEvery (service-account tokens rotate:
// without it every rotated token would stay for the process's life). g.mu is held.
func (g *Guard) pruneLocked() {
	now := g.now()
	if now.Sub(g.lastPruned) < PruneEvery {
		return
	}
	g.lastPruned = now
	prune(g.users, now, func(e userEntry) time.Time { return e.expires })
	prune(g.decisions, now, func(e decisionEntry) time.Time { return e.expires })
}

// prune drops the expired entries of m.
func prune[K comparable, V any](m map[K]V, now time.Time, expires func(V) time.Time) {
	for k, v := range m {
		if !now.Before(expires(v)) {
			delete(m, k)
		}
	}
}
