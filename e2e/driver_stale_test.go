package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/provider"
)

// MetalLB (v0.15.2 through v0.16.2) drops every Service event after a restart until one pass over all Services
// succeeds; a placeholder the driver deletes while those passes keep failing stays allocated in
// MetalLB's memory under its name. The driver must make MetalLB let go of it (a release Service of
// that name), so that the hold made in that window, or the Service attached in it, gets the IP.
//
// MetalLB's passes are made to fail on purpose: a ValidatingAdmissionPolicy denies the status
// writes of one labelled LoadBalancer Service (in a namespace of its own, from a pool of its own),
// so every pass of MetalLB's after its restart ends in a retry until the policy is removed.
//
// The scenes' Services use the holds' port (unshareable): a Service that can share its IP with the
// hold is attached without deleting it, and its detach leaves the IP held, so neither leaves a
// deleted holder in MetalLB's memory.
//
// On MetalLB built with the project's patches (metallb_build_test.go) the same scenes show that
// the answer is never needed: MetalLB handles the deletions in that window, and the driver
// releases nothing and reports nothing.

// The hold: a Service attached and gone again while MetalLB's pass fails. The first hold (the
// claim's provisioning placeholder, relabelled) was deleted by the attach; the new hold, under
// another name, is refused because MetalLB still counts the IP as the first one's.
func TestDriverReleasesAStaleAllocationForAHold(t *testing.T) {
	f := features.New("a hold refused for a deleted placeholder's allocation").
		Assess("is served once the driver releases the deleted name", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			s := newStaleScene(ctx, t, c, "hold", "203.0.113.64/30", "203.0.113.72/30")
			first := holdOf(ctx, t, c, s.addr)
			t.Logf("%s held by %s", s.ip, first.Name)
			s.metallbFailingAfterRestart(ctx, t)
			// The hold was created with the claim; a Service of its name created from here on
			// is a release Service.
			attached := time.Now()
			svc := unshareable(lbServiceFor(s.ns, "kept", ipamv1.IPv4))
			if err := c.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			waitGone(ctx, t, c, first)
			eventually(ctx, t, 30*time.Second, "the Service to be pinned", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc)
				return svc.Annotations[pinnedMarker] == "true", err
			})
			if err := c.Delete(ctx, svc); err != nil {
				t.Fatal(err)
			}
			var second *corev1.Service
			eventually(ctx, t, 30*time.Second, "a new hold", func(ctx context.Context) (bool, error) {
				var list corev1.ServiceList
				err := c.List(ctx, &list, client.InNamespace(driverNamespace),
					client.MatchingLabels{addressLabel: s.addr, roleLabel: "hold"})
				if err != nil || len(list.Items) != 1 {
					return false, err
				}
				second = &list.Items[0]
				return true, nil
			})
			if second.Name == first.Name {
				t.Fatalf("the new hold has the old one's name %s: MetalLB would take it for the same Service", first.Name)
			}
			if patchedMetalLB() {
				// MetalLB handled the first hold's deletion in its restart window: once its pass
				// succeeds the new hold is served, never refused, and nothing is released.
				s.allowMetalLB(ctx, t)
				waitHeld(ctx, t, c, s.addr, s.ip)
				noRefusalNaming(ctx, t, c, driverNamespace, driverNamespace+"/"+first.Name)
				noReleaseServices(t, attached, second.Name)
				neverKept(ctx, t, c, s.addr)
				s.checkSettled(ctx, t)
				return ctx
			}
			// MetalLB's next pass refuses the new hold: the IP is the deleted one's.
			refusedFor(ctx, t, c, driverNamespace, second.Name, first)
			s.allowMetalLB(ctx, t)
			waitHeld(ctx, t, c, s.addr, s.ip)
			s.checkSettled(ctx, t)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// The Service: attached while MetalLB's pass fails. The hold the attach deleted keeps the IP in
// MetalLB's memory, and the Service's pin is refused.
func TestDriverReleasesAStaleAllocationForAService(t *testing.T) {
	f := features.New("a Service refused for a deleted hold's allocation").
		Assess("is served once the driver releases the deleted name", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			s := newStaleScene(ctx, t, c, "svc", "203.0.113.68/30", "203.0.113.76/30")
			hold := holdOf(ctx, t, c, s.addr)
			t.Logf("%s held by %s", s.ip, hold.Name)
			s.metallbFailingAfterRestart(ctx, t)
			st, err := os.Stat(s.metallbLog)
			if err != nil {
				t.Fatal(err)
			}
			attached := time.Now()
			if err := c.Create(ctx, unshareable(lbServiceFor(s.ns, "kept", ipamv1.IPv4))); err != nil {
				t.Fatal(err)
			}
			waitGone(ctx, t, c, hold)
			// MetalLB's next pass counts the IP as the deleted hold's: the Service is refused
			// (its log says so). The chart's hand-over-events policy keeps that report off the
			// tenant's Service, since the IP is "in use by" a Service of the driver's namespace.
			if patchedMetalLB() {
				// MetalLB handled the hold's deletion in its restart window: the Service is served
				// once its pass succeeds, never refused, and nothing is released.
				s.allowMetalLB(ctx, t)
				waitIngress(ctx, t, c, s.ns, "kept", []string{s.ip})
				s.notRefusedInLog(t, st.Size(), "kept", hold)
				noReleaseServices(t, attached)
				neverKept(ctx, t, c, s.addr)
				s.checkSettled(ctx, t)
				return ctx
			}
			refusedFrom := time.Now().Add(-time.Minute)
			s.refusedInLog(ctx, t, st.Size(), "kept", hold)
			s.allowMetalLB(ctx, t)
			waitIngress(ctx, t, c, s.ns, "kept", []string{s.ip})
			// MetalLB did try to record its refusal (in the background): on the local provider
			// the audit log shows the apiserver refusing that event write, so the check below is
			// not vacuous. Then none is on the tenant's Service.
			if local, ok := cluster.(*provider.LocalCluster); ok {
				err := await(ctx, 30*time.Second, func(context.Context) (bool, error) {
					return metallbRefusedEvents(t, local.AuditLog, s.ns, refusedFrom)["kept"] > 0, nil
				})
				if err != nil {
					t.Errorf("MetalLB never tried to record its refusal of kept: the check below proves nothing")
				}
			}
			var evs eventsv1.EventList
			if err := c.List(ctx, &evs, client.InNamespace(s.ns)); err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Items {
				if e.Regarding.Name == "kept" && e.Reason == "AllocationFailed" {
					t.Errorf("MetalLB's report was recorded on the tenant's Service: %s", e.Note)
				}
			}
			s.checkSettled(ctx, t)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// A tenant's name: the attached Service is deleted while MetalLB's passes fail after a restart.
// MetalLB keeps the IP under the tenant Service's name, which the driver cannot release (it
// creates Services only in its own namespace): the address says so, naming the Service and the
// remedy, and once MetalLB's controller is restarted (the remedy) the IP is served again. Whether
// the next one to ask for the IP is the hold (hold) or another Service attached to the claim.
func TestDriverReportsAnAllocationMetalLBKeptForADeletedTenantService(t *testing.T) {
	f := features.New("a reserved IP MetalLB keeps for a deleted tenant Service").
		Assess("is reported on the address, and held again after MetalLB's restart", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			s := newStaleScene(ctx, t, c, "tenant", "203.0.113.84/30", "203.0.113.88/30")
			s.keptForDeletedService(ctx, t, nil)
			waitHeld(ctx, t, c, s.addr, s.ip)
			s.checkSettled(ctx, t)
			return ctx
		}).
		Assess("is reported while another Service attached to the claim waits, which is served after the restart", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			s := newStaleScene(ctx, t, c, "next", "203.0.113.92/30", "203.0.113.96/30")
			next := unshareable(lbService(s.ns, "next", map[string]string{claimAnnotation: "kept"}, false))
			s.keptForDeletedService(ctx, t, next)
			waitIngress(ctx, t, c, s.ns, "next", []string{s.ip})
			s.checkSettled(ctx, t)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// keptForDeletedService attaches a Service to the scene's claim, deletes it while MetalLB's passes
// fail after a restart, creates next (when not nil) attached to the same claim, waits until the
// address says KeptByMetalLB naming the deleted Service (and keeps saying it), and restarts
// MetalLB's controller, the documented remedy.
func (s *staleScene) keptForDeletedService(ctx context.Context, t *testing.T, next *corev1.Service) {
	t.Helper()
	c := s.c
	svc := unshareable(lbServiceFor(s.ns, "kept", ipamv1.IPv4))
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitIngress(ctx, t, c, s.ns, "kept", []string{s.ip})
	s.metallbFailingAfterRestart(ctx, t)
	if err := c.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, c, svc)
	if next != nil {
		if err := c.Create(ctx, next); err != nil {
			t.Fatal(err)
		}
	}
	s.allowMetalLB(ctx, t)
	if patchedMetalLB() {
		// MetalLB handled the deletion in its restart window: there is nothing to report and no
		// restart to ask for. The caller waits for the next in line to be served; checkSettled
		// then checks that the address never said KeptByMetalLB.
		return
	}
	heldReason := func(ctx context.Context) (*metav1.Condition, error) {
		var a ipamv1.IPAddress
		if err := c.Get(ctx, client.ObjectKey{Name: s.addr}, &a); err != nil {
			return nil, err
		}
		return meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld), nil
	}
	var held *metav1.Condition
	eventually(ctx, t, 4*time.Minute, "the address to say MetalLB keeps its IP for the deleted Service", func(ctx context.Context) (bool, error) {
		var err error
		held, err = heldReason(ctx)
		return held != nil && held.Reason == "KeptByMetalLB", err
	})
	if !strings.Contains(held.Message, s.ns+"/kept") || !strings.Contains(held.Message, "restart MetalLB's controller") {
		t.Fatalf("the condition does not name the kept Service and the remedy: %s", held.Message)
	}
	waitAddressEvent(ctx, t, c, s.addr, "KeptByMetalLB")
	if next != nil {
		// The tenant hears that its Service waits, and why, without a name of another tenant
		// (noOtherTenantNamed in the suite's other tests covers that).
		waitServiceEvent(ctx, t, c, s.ns, "next", "NotServed")
	}
	// It stays said, and is said once: across a restart of the driver (whose memory goes with
	// it), with no status write and no second Warning.
	said := addressEventCount(ctx, t, c, s.addr, "KeptByMetalLB")
	restart(ctx, t, "metallb-iad")
	consistently(ctx, t, 25*time.Second, "the address to keep saying KeptByMetalLB", func(ctx context.Context) (bool, error) {
		h, err := heldReason(ctx)
		return h != nil && h.Reason == "KeptByMetalLB" && h.LastTransitionTime.Equal(&held.LastTransitionTime), err
	})
	if n := addressEventCount(ctx, t, c, s.addr, "KeptByMetalLB"); n != said {
		t.Errorf("the KeptByMetalLB Warning was said %d times, then %d after the driver restarted", said, n)
	}
	restart(ctx, t, "metallb-controller")
}

// waitAddressEvent waits for an event of that reason on the (cluster-scoped) IPAddress.
func waitAddressEvent(ctx context.Context, t *testing.T, c client.Client, address, reason string) {
	t.Helper()
	eventually(ctx, t, 30*time.Second, fmt.Sprintf("event %s on IPAddress %s", reason, address), func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "IPAddress" && e.Regarding.Name == address && e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
}

// addressEventCount counts the events of that reason on the (cluster-scoped) IPAddress, repeats
// included.
func addressEventCount(ctx context.Context, t *testing.T, c client.Client, address, reason string) int {
	t.Helper()
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.Regarding.Kind == "IPAddress" && e.Regarding.Name == address && e.Reason == reason {
			k := max(1, int(e.DeprecatedCount))
			if e.Series != nil {
				k = max(k, int(e.Series.Count))
			}
			n += k
		}
	}
	return n
}

// staleScene is one claim Bound and held in a class of its own, and a blocker Service whose
// status MetalLB cannot write while the policy is in force.
type staleScene struct {
	ns, class, addr, ip string
	metallbLog          string
	blocker             *corev1.Service
	c                   client.Client
}

func newStaleScene(ctx context.Context, t *testing.T, c client.Client, tag, claimRange, blockerRange string) *staleScene {
	t.Helper()
	local := localCluster(t)
	s := &staleScene{c: c, class: "e2e-stale-" + tag}
	for _, p := range local.Processes() {
		if p.Spec.Name == "metallb-controller" {
			s.metallbLog = p.LogPath
		}
	}
	if s.metallbLog == "" {
		t.Fatal("no metallb-controller process")
	}
	s.ns = tenantNamespace(ctx, t, c, "tenant-stale-"+tag)
	poolWithClass(ctx, t, c, s.class, ipamv1.ReclaimRetain, claimRange)
	newTenantClaim(ctx, t, c, s.ns, "kept", s.class, ipamv1.IPv4)
	claim := waitClaimBound(ctx, t, c, s.ns, "kept")
	s.addr, s.ip = claim.Status.Addresses[0].Name, claim.Status.Addresses[0].Address
	waitHeld(ctx, t, c, s.addr, s.ip)
	s.blocker = denyMetalLBStatusWrites(ctx, t, c, "stale-blocker-"+tag, blockerRange)
	return s
}

func (s *staleScene) metallbFailingAfterRestart(ctx context.Context, t *testing.T) {
	t.Helper()
	metallbFailingAfterRestart(ctx, t, s.metallbLog, s.blocker)
}

func (s *staleScene) allowMetalLB(ctx context.Context, t *testing.T) {
	t.Helper()
	allowMetalLBStatusWrites(ctx, t, s.c)
}

// checkSettled: every address held once, and the release Services gone once their work is done.
func (s *staleScene) checkSettled(ctx context.Context, t *testing.T) {
	t.Helper()
	checkInvariants(ctx, t, s.c, invariantScope{Classes: []string{s.class}, Namespaces: []string{s.ns}})
	if patchedMetalLB() {
		neverKept(ctx, t, s.c, s.addr)
	}
	eventually(ctx, t, 90*time.Second, "no release Service left in the driver's namespace", func(ctx context.Context) (bool, error) {
		var list corev1.ServiceList
		if err := s.c.List(ctx, &list, client.InNamespace(driverNamespace), client.MatchingLabels{roleLabel: "release"}); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
}

const (
	roleLabel    = "metallb.drivers.local.sdn.cozystack.io/role"
	addressLabel = "metallb.drivers.local.sdn.cozystack.io/address"
	denyLabel    = "e2e.reserved-ips.cozystack.io/deny-metallb-status"
	denyPolicy   = "e2e-deny-metallb-status"
)

// denyMetalLBStatusWrites makes MetalLB's status writes of one LoadBalancer Service fail: a
// policy denies every status update of Services labelled denyLabel, and the Service (of a pool
// of its own, in a namespace that is not a tenant's) asks MetalLB for an address it cannot
// record. It returns the Service. Everything is removed at the end of the test.
func denyMetalLBStatusWrites(ctx context.Context, t *testing.T, c client.Client, name, poolRange string) *corev1.Service {
	t.Helper()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: denyPolicy},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{denyLabel: "true"}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
						Resources: []string{"services/status"}},
				}}},
			},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "the e2e test denies this status write"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: denyPolicy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: denyPolicy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { allowMetalLBStatusWrites(context.Background(), t, c) })

	// Not a tenant namespace: the service-pins policy would refuse the pool annotation there.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	newPool(ctx, t, c, name, ptrTo(false), poolRange)
	// Created as a ClusterIP Service first (MetalLB writes nothing for it), so that the policy
	// is seen in force before MetalLB has anything to write.
	b := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: name, Labels: map[string]string{denyLabel: "true"},
			Annotations: map[string]string{poolAnnotation: name}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, 30*time.Second, "the policy to deny status writes of the blocker", func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), &s); err != nil {
			return false, err
		}
		s.Status.Conditions = []metav1.Condition{{Type: "E2EProbe", Status: metav1.ConditionTrue, Reason: "Probe",
			LastTransitionTime: metav1.Now()}}
		err := c.Status().Update(ctx, &s, client.DryRunAll)
		if err == nil {
			return false, fmt.Errorf("a status write was admitted")
		}
		if strings.Contains(err.Error(), "denies this status write") {
			return true, nil
		}
		return false, err
	})
	patch := client.MergeFrom(b.DeepCopy())
	b.Spec.Type = corev1.ServiceTypeLoadBalancer
	b.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
	if err := c.Patch(ctx, b, patch); err != nil {
		t.Fatal(err)
	}
	return b
}

// allowMetalLBStatusWrites removes the policy of denyMetalLBStatusWrites.
func allowMetalLBStatusWrites(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	for _, o := range []client.Object{
		&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: denyPolicy}},
		&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: denyPolicy}},
	} {
		if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
}

// metallbFailingAfterRestart kills MetalLB's controller, waits until the supervisor restarted
// it, and then until its log shows a pass over all Services that failed on the blocker.
func metallbFailingAfterRestart(ctx context.Context, t *testing.T, logPath string, blocker *corev1.Service) {
	t.Helper()
	st, err := os.Stat(logPath)
	if err != nil {
		t.Fatal(err)
	}
	offset := st.Size()
	restart(ctx, t, "metallb-controller")
	eventually(ctx, t, 60*time.Second, "MetalLB's pass over all Services to fail on the blocker", func(ctx context.Context) (bool, error) {
		data, err := os.ReadFile(logPath)
		if err != nil || int64(len(data)) < offset {
			return false, err
		}
		for _, line := range strings.Split(string(data[offset:]), "\n") {
			if strings.Contains(line, "failed to handle service, retry") && strings.Contains(line, blocker.Name) {
				return true, nil
			}
		}
		return false, nil
	})
}

// refusedFor waits for MetalLB's AllocationFailed on the Service naming the deleted placeholder
// as the IP's holder: the kept allocation is reproduced.
func refusedFor(ctx context.Context, t *testing.T, c client.Client, ns, name string, deleted *corev1.Service) {
	t.Helper()
	holder := deleted.Namespace + "/" + deleted.Name
	eventually(ctx, t, 60*time.Second, fmt.Sprintf("MetalLB to refuse %s/%s for %s", ns, name, holder), func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			// A deleted placeholder under the same sharing key is reported by the port they
			// both use: MetalLB names no Service then.
			byPort := deleted.Namespace == driverNamespace && strings.Contains(e.Note, "port TCP/1 is already in use on")
			if e.Regarding.Name == name && e.Reason == "AllocationFailed" && (strings.Contains(e.Note, "in use by "+holder) || byPort) {
				t.Logf("MetalLB: %s", e.Note)
				return true, nil
			}
		}
		return false, nil
	})
}

// refusedInLog waits until MetalLB's log, from offset on, shows its refusal of the scene's
// Service name for the IP "in use by" the deleted Service.
func (s *staleScene) refusedInLog(ctx context.Context, t *testing.T, offset int64, name string, deleted *corev1.Service) {
	t.Helper()
	key, holder := s.ns+"/"+name, deleted.Namespace+"/"+deleted.Name
	eventually(ctx, t, 60*time.Second, fmt.Sprintf("MetalLB to refuse %s for %s (its log)", key, holder), func(context.Context) (bool, error) {
		data, err := os.ReadFile(s.metallbLog)
		if err != nil || int64(len(data)) < offset {
			return false, err
		}
		for _, line := range strings.Split(string(data[offset:]), "\n") {
			if strings.Contains(line, key) && strings.Contains(line, "also in use by "+holder) {
				t.Logf("MetalLB: %s", line)
				return true, nil
			}
		}
		return false, nil
	})
}

// notRefusedInLog fails the test when MetalLB's log, from offset on, shows a refusal of the
// scene's Service name for the IP "in use by" the deleted Service.
func (s *staleScene) notRefusedInLog(t *testing.T, offset int64, name string, deleted *corev1.Service) {
	t.Helper()
	key, holder := s.ns+"/"+name, deleted.Namespace+"/"+deleted.Name
	data, err := os.ReadFile(s.metallbLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data[min(offset, int64(len(data))):]), "\n") {
		if strings.Contains(line, key) && strings.Contains(line, "also in use by "+holder) {
			t.Errorf("MetalLB refused %s for %s: %s", key, holder, line)
		}
	}
}

// unshareable gives a Service the port the driver's holds use (TCP/1), so that it cannot share its
// IP with a hold: it gets the hand-over that deletes the hold first, which is the one MetalLB's
// restart window can leave an allocation behind from.
func unshareable(svc *corev1.Service) *corev1.Service {
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "hold-port", Port: 1, Protocol: corev1.ProtocolTCP})
	return svc
}

// holdOf is the placeholder that holds the address.
func holdOf(ctx context.Context, t *testing.T, c client.Client, address string) *corev1.Service {
	t.Helper()
	var list corev1.ServiceList
	if err := c.List(ctx, &list, client.InNamespace(driverNamespace),
		client.MatchingLabels{addressLabel: address, roleLabel: "hold"}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("address %s has %d holds", address, len(list.Items))
	}
	return &list.Items[0]
}

func waitGone(ctx context.Context, t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	eventually(ctx, t, 30*time.Second, fmt.Sprintf("%s to be gone", client.ObjectKeyFromObject(o)), func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// The allocation MetalLB kept for a Service that no longer requests it (issue 13, chaos seed
// 212695508): MetalLB wrote a reserved IP back into the status of a Service the driver had
// unpinned, and its next first pass, finding the IP in that status, kept it for the Service.
// Nothing on the Service requests the IP, so an admin has nothing to remove; the driver clears
// the status itself, MetalLB lets go, and the hold gets the IP back.
//
// The scene is set with both controllers stopped: the hold is deleted and the IP written into
// the status of a plain Service, as MetalLB's stale write left it; MetalLB then starts and its
// first pass takes the IP for that Service (its real behaviour), and the driver starts last.
func TestDriverClearsAnAllocationMetalLBKeptForAServiceThatRequestsNothing(t *testing.T) {
	f := features.New("a reserved IP MetalLB kept for a Service that requests nothing").
		Assess("is cleared by the driver and held again", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-stale-former")
			poolWithClass(ctx, t, c, "e2e-stale-former", ipamv1.ReclaimRetain, "203.0.113.80/30")
			newTenantClaim(ctx, t, c, ns, "kept", "e2e-stale-former", ipamv1.IPv4)
			claim := waitClaimBound(ctx, t, c, ns, "kept")
			addr, ip := claim.Status.Addresses[0].Name, claim.Status.Addresses[0].Address
			waitHeld(ctx, t, c, addr, ip)
			hold := holdOf(ctx, t, c, addr)

			startMetalLB := stopProcess(t, "metallb-controller")
			startDriver := stopProcess(t, "metallb-iad")
			if err := c.Delete(ctx, hold); err != nil {
				t.Fatal(err)
			}
			former := lbService(ns, "former", map[string]string{autoClaimAnnotation: "false"}, false)
			if err := c.Create(ctx, former); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 30*time.Second, "the stale status to be written", func(ctx context.Context) (bool, error) {
				if err := c.Get(ctx, client.ObjectKeyFromObject(former), former); err != nil {
					return false, err
				}
				former.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
				return c.Status().Update(ctx, former) == nil, nil
			})
			startMetalLB()
			eventually(ctx, t, 60*time.Second, "MetalLB to keep the IP for the Service", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(former), former)
				return former.Annotations["metallb.io/ip-allocated-from-pool"] != "", err
			})
			startDriver()

			waitHeld(ctx, t, c, addr, ip)
			waitServiceEvent(ctx, t, c, ns, "former", "StaleAddressCleared")
			if err := c.Get(ctx, client.ObjectKeyFromObject(former), former); err != nil {
				t.Fatal(err)
			}
			if got := ingressOf(former); slices.Contains(got, ip) {
				t.Fatalf("the Service still shows %s: %v", ip, got)
			}
			var a ipamv1.IPAddress
			if err := c.Get(ctx, client.ObjectKey{Name: addr}, &a); err != nil {
				t.Fatal(err)
			}
			if cond := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionConflict); cond != nil && cond.Status == metav1.ConditionTrue {
				t.Fatalf("the address is in Conflict: %s", cond.Message)
			}
			checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-stale-former"}, Namespaces: []string{ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
