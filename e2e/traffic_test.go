package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/kindnode"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// trafficPool is a slice of the kind nodes' Docker network (kindnode.Network.Subnet), which the
// host reaches through its bridge: MetalLB's speaker answers ARP for these addresses on the
// node's interface.
const trafficPool = "198.18.1.200-198.18.1.219"

// Real traffic: a request from this machine reaches a pod through the address a tenant
// reserved, announced by MetalLB's speaker (layer 2) on the kind network; with the Service
// deleted the address stops answering, and once the Service is created again naming the same
// claim, the same address answers again.
func TestTrafficThroughAReservedAddress(t *testing.T) {
	f := features.New("the reserved address carries traffic to the pod, before and after the Service is re-created").
		Assess("request, delete, re-create, request", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			loader, ok := cluster.(provider.ImageLoader)
			if !ok {
				t.Skipf("SKIPPED on the %s provider: %s needs a node network that a speaker announces on and that this machine reaches (the kind provider); the local provider runs no speaker and no pods", providerName(), t.Name())
			}
			c := ipamClient(t)
			poolWithClass(ctx, t, c, "e2e-traffic", ipamv1.ReclaimRetain, trafficPool)
			l2 := &unstructured.Unstructured{}
			l2.SetAPIVersion("metallb.io/v1beta1")
			l2.SetKind("L2Advertisement")
			l2.SetNamespace(metallbNamespace)
			l2.SetName("e2e-traffic")
			l2.Object["spec"] = map[string]any{"ipAddressPools": []any{"e2e-traffic"}}
			createPool(ctx, t, c, l2)

			ns := tenantNamespace(ctx, t, c, "tenant-traffic")
			t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
			ref := "reserved-ips.test/echo-server:e2e"
			img, err := echoServerImage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := loader.LoadImage(ref, img); err != nil {
				t.Fatal(err)
			}
			labels := map[string]string{"app": "echo"}
			dep := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"},
				Spec: appsv1.DeploymentSpec{
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{
							Name: "echo", Image: ref, ImagePullPolicy: corev1.PullNever,
							Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
							Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
								FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						}}},
					},
				},
			}
			if err := c.Create(ctx, dep); err != nil {
				t.Fatal(err)
			}
			newTenantClaim(ctx, t, c, ns, "web", "e2e-traffic", ipamv1.IPv4)
			ip := claimIPs(waitClaimBound(ctx, t, c, ns, "web"))[0]
			if !mustPrefix(kindnode.Network.Subnet).Contains(mustAddr(ip)) {
				t.Fatalf("the claim got %s, outside the kind network %s", ip, kindnode.Network.Subnet)
			}
			service := func() *corev1.Service {
				svc := lbService(ns, "web", map[string]string{claimAnnotation: "web"}, false)
				svc.Spec.Selector = labels
				svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
				return svc
			}
			url := "http://" + ip + "/"

			if err := c.Create(ctx, service()); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "web", []string{ip})
			first := waitAnswer(ctx, t, url)
			t.Logf("%s answered %q", url, first)

			// Deleted: the address is held for the claim and no longer leads to the pod.
			if err := c.Delete(ctx, service()); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "the Service to be gone", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &corev1.Service{})
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			eventually(ctx, t, 60*time.Second, url+" to stop answering", func(ctx context.Context) (bool, error) {
				_, err := get(ctx, url)
				return err != nil, nil
			})

			// Re-created with the same claim: the same address answers again.
			if err := c.Create(ctx, service()); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "web", []string{ip})
			again := waitAnswer(ctx, t, url)
			t.Logf("%s answered %q again", url, again)
			if claim := waitClaimBound(ctx, t, c, ns, "web"); claimIPs(claim)[0] != ip {
				t.Fatalf("the claim moved from %s to %v", ip, claimIPs(claim))
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// get sends one request with a short timeout and returns the body of a 200 answer.
func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), nil
}

// waitAnswer polls url (at most 90 s, one request a second) until the echo server answers.
func waitAnswer(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	var body string
	eventually(ctx, t, 90*time.Second, url+" to answer from the echo server", func(ctx context.Context) (bool, error) {
		b, err := get(ctx, url)
		if err != nil || !strings.HasPrefix(b, "echo-server echo-") {
			time.Sleep(time.Second)
			return false, nil
		}
		body = strings.TrimSpace(b)
		return true, nil
	})
	return body
}

// echoServerImage builds tools/cmd/echo-server (static) into a one-layer image.
func echoServerImage(ctx context.Context) (v1.Image, error) {
	root, err := sandbox.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "echo-server-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "echo-server")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/echo-server")
	cmd.Dir = filepath.Join(root, "tools")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build echo-server: %w: %s", err, b)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "echo-server", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{"/echo-server"}
	return mutate.ConfigFile(img, cfg)
}
