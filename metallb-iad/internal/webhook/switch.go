package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/pkg/parking"
)

// The chart's webhook for Services that name no claim nor class, and its condition that says
// whether auto-claim is on.
const (
	AutoClaimedWebhook        = "park-auto-claimed.metallb-iad.local.sdn.cozystack.io"
	AutoClaimEnabledCondition = "auto-claim-enabled"
)

// AutoClaimSwitch keeps the auto-claim-enabled condition of the configuration's
// park-auto-claimed webhook "true" exactly while a class of this driver, not being deleted, is
// marked for auto-claim, and "false" otherwise: until an admin turns auto-claim on, no Service
// that names no claim nor class is sent to the driver, so that none waits on it (the webhook's
// failure policy refuses a write it must see while the driver is down). Only the leader writes
// it. It looks again on every class change, and every Recheck without one.
type AutoClaimSwitch struct {
	Client        client.Client
	Reader        client.Reader
	Cache         cache.Cache
	Configuration string
	// Recheck is how often it looks without a class change (DefaultRecheck when zero).
	Recheck time.Duration
}

// NeedLeaderElection is true: one writer.
func (s *AutoClaimSwitch) NeedLeaderElection() bool { return true }

// Start keeps the condition until ctx ends.
func (s *AutoClaimSwitch) Start(ctx context.Context) error {
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	inf, err := s.Cache.GetInformer(ctx, &ipamv1.IPAddressClass{})
	if err != nil {
		return err
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
	})
	if err != nil {
		return err
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	recheck := s.Recheck
	if recheck <= 0 {
		recheck = DefaultRecheck
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 7, Cap: time.Minute}
	for {
		next := recheck
		if err := s.Ensure(ctx); err != nil {
			log.FromContext(ctx).Error(err, "keeping the parking webhook's auto-claim switch")
			if backoff.Steps <= 1 {
				backoff.Steps = 2
			}
			next = backoff.Step()
		} else {
			backoff.Duration, backoff.Steps = time.Second, 7
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(next):
		}
	}
}

// AutoClaimOn says whether a class of this driver, not being deleted, is marked for auto-claim.
func AutoClaimOn(classes []ipamv1.IPAddressClass) bool {
	for _, c := range classes {
		if c.Spec.Provisioner == parking.Provisioner && c.DeletionTimestamp == nil && c.Annotations[ipamv1.AnnotationAutoClaimClass] == "true" {
			return true
		}
	}
	return false
}

// Ensure brings the condition to what the classes say, once: a write only when it differs, as a
// JSON patch that tests the configuration's resourceVersion and the names at the indexes it
// writes.
func (s *AutoClaimSwitch) Ensure(ctx context.Context) error {
	var classes ipamv1.IPAddressClassList
	if err := s.Cache.List(ctx, &classes); err != nil {
		return err
	}
	want := fmt.Sprint(AutoClaimOn(classes.Items))
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := s.Reader.Get(ctx, client.ObjectKey{Name: s.Configuration}, &cfg); err != nil {
		return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", s.Configuration, err)
	}
	for i, w := range cfg.Webhooks {
		if w.Name != AutoClaimedWebhook {
			continue
		}
		for j, mc := range w.MatchConditions {
			if mc.Name != AutoClaimEnabledCondition || mc.Expression == want {
				continue
			}
			patch, err := json.Marshal([]map[string]any{
				{"op": "test", "path": "/metadata/resourceVersion", "value": cfg.ResourceVersion},
				{"op": "test", "path": fmt.Sprintf("/webhooks/%d/name", i), "value": w.Name},
				{"op": "test", "path": fmt.Sprintf("/webhooks/%d/matchConditions/%d/name", i, j), "value": mc.Name},
				{"op": "replace", "path": fmt.Sprintf("/webhooks/%d/matchConditions/%d/expression", i, j), "value": want},
			})
			if err != nil {
				return err
			}
			if err := s.Client.Patch(ctx, &cfg, client.RawPatch(types.JSONPatchType, patch)); err != nil {
				return fmt.Errorf("turning auto-claim parking %s in MutatingWebhookConfiguration %s: %w", onOff(want), s.Configuration, err)
			}
			log.FromContext(ctx).Info("parking webhook: Services that name no claim nor class are now "+map[string]string{"true": "sent to the driver (a class is marked for auto-claim)", "false": "left alone (no class is marked for auto-claim)"}[want],
				"configuration", s.Configuration)
			return nil
		}
		return nil
	}
	return fmt.Errorf("MutatingWebhookConfiguration %s has no webhook %s with a condition %s", s.Configuration, AutoClaimedWebhook, AutoClaimEnabledCondition)
}

func onOff(b string) string {
	if b == "true" {
		return "on"
	}
	return "off"
}
