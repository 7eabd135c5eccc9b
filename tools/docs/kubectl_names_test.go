package docs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// ourGroup is the API group every documented command about this API must reach.
const ourGroup = "local.sdn.cozystack.io"

// kubectlVerbs are the kubectl commands whose first argument names a resource type.
var kubectlVerbs = []string{"get", "describe", "explain", "edit", "patch", "delete", "wait", "annotate", "label"}

// flagsWithValue are the kubectl flags used in the docs that take the next word as their value.
var flagsWithValue = []string{"-n", "--namespace", "-o", "--output", "-l", "--selector", "--as", "--as-group", "-f",
	"--filename", "--field-selector", "--for", "--timeout", "-p", "--patch", "--type", "--context", "--sort-by",
	"--kubeconfig", "-c", "--container", "--api-version", "--template"}

// kubectlCommand is a kubectl command the docs show, and where.
type kubectlCommand struct {
	where, line string
}

// documentedKubectl returns every kubectl command line of the Markdown pages (code blocks and
// code spans) and of the charts' NOTES.txt.
func documentedKubectl(t *testing.T, root string) []kubectlCommand {
	t.Helper()
	var out []kubectlCommand
	add := func(where, text string) {
		for _, l := range strings.Split(text, "\n") {
			if i := strings.Index(l, "kubectl "); i >= 0 {
				out = append(out, kubectlCommand{where, strings.TrimSpace(l[i:])})
			}
		}
	}
	md, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range md {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		p := parsePage(string(data))
		for _, b := range p.codeBlocks() {
			add(f, b.text)
		}
		for _, s := range p.codeSpans(p.doc) {
			add(f, s)
		}
	}
	notes, _ := filepath.Glob(filepath.Join(root, "charts", "*", "templates", "NOTES.txt"))
	for _, f := range notes {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		add(filepath.ToSlash(rel), string(data))
	}
	return out
}

// resourceArgs returns the resource types a kubectl command line names: the first argument after
// its verb (split at commas, without a /NAME), and every later TYPE/NAME argument. For explain
// the argument is kept whole (RESOURCE.FIELD), as kubectl explain takes it.
func resourceArgs(line string) (verb string, types []string) {
	words := strings.Fields(strings.NewReplacer(`"`, " ", `'`, " ", "`", " ", "$(", " ", ")", " ").Replace(line))
	if len(words) == 0 || words[0] != "kubectl" {
		return "", nil
	}
	var args []string
	for i := 1; i < len(words); i++ {
		w := words[i]
		if w == "|" || w == ";" || w == "&&" || w == "#" || w == "\\" || w == "<<" || strings.HasPrefix(w, "<<") {
			break
		}
		if strings.HasPrefix(w, "-") {
			if !strings.Contains(w, "=") && slices.Contains(flagsWithValue, w) {
				i++
			}
			continue
		}
		args = append(args, w)
	}
	if len(args) < 2 || !slices.Contains(kubectlVerbs, args[0]) {
		return "", nil
	}
	verb = args[0]
	if verb == "explain" {
		return verb, []string{args[1]}
	}
	for i, a := range args[1:] {
		typ, _, named := strings.Cut(a, "/")
		if i > 0 && !named {
			continue // a name, a key=value, a field path
		}
		types = append(types, strings.Split(typ, ",")...)
	}
	return verb, types
}

// ourNames are the names kubectl takes for this API's resources (kinds, plurals, singulars, short
// names, the category), from the CRDs the chart installs.
func ourNames(t *testing.T, root string) (names map[string]bool, categories map[string]bool) {
	t.Helper()
	names, categories = map[string]bool{}, map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(root, "charts", "address-controller", "files", "crds", "*.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatal(err)
		}
		n := crd.Spec.Names
		for _, s := range append([]string{strings.ToLower(n.Kind), n.Plural, n.Singular}, n.ShortNames...) {
			names[s] = true
		}
		for _, c := range n.Categories {
			categories[c] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("no CRD of the API found")
	}
	return names, categories
}

// Cluster API, which Cozystack runs for tenant clusters, serves its own IPAddressClaim and
// IPAddress kinds (ipam.cluster.x-k8s.io), and Kubernetes serves networking.k8s.io IPAddress:
// a bare kind name then reaches whichever group kubectl prefers, not necessarily this API's.
// Every kubectl command of the docs and the charts' notes that names a resource of this API must
// reach it there: on a real apiserver with those CRDs installed beside the chart's, kubectl
// itself (explain, with a fresh discovery cache) resolves each documented resource argument, and
// a category lists only this API's resources.
func TestDocumentedKubectlCommandsReachThisAPI(t *testing.T) {
	root := filepath.Join("..", "..")
	names, categories := ourNames(t, root)
	commands := documentedKubectl(t, root)
	kubectl, err := binaries.Kubernetes.Path("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.Start(context.Background(), controlplane.Options{WithoutControllerManager: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	crds, _ := filepath.Glob(filepath.Join(root, "charts", "address-controller", "files", "crds", "*.yaml"))
	crds = append(crds, filepath.Join("testdata", "clusterapi-ipam-crds.yaml"))
	for _, f := range crds {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubeapply.Apply(context.Background(), cp.Config, "docs-test", data); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", cp.Kubeconfig, "--cache-dir", cache}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	explainRE := regexp.MustCompile(`(?m)^GROUP:\s*(\S+)`)
	// The request a command makes for the resource: /apis/GROUP/VERSION[/namespaces/NS]/RESOURCE
	// (or /api/v1/... for the core group), as kubectl logs it at -v=6.
	requestRE := regexp.MustCompile(`url="https?://[^/"]+/(?:api|apis/([^/"]+))/v[^/"]+/(?:namespaces/[^/"]+/)?[a-z]+[?"]`)
	// groupOf is the group kubectl reaches for a resource argument of verb: explain says it; any
	// other verb resolves its argument as get does, and get's request shows it. It waits for the
	// apiserver to serve every CRD (a CRD is served a moment after it is created).
	groupOf := func(verb, arg string) (string, string) {
		var out string
		for range 100 {
			var err error
			if verb == "explain" {
				out, err = run("explain", arg)
				if m := explainRE.FindStringSubmatch(out); err == nil && m != nil {
					return m[1], out
				}
			} else {
				out, err = run("get", arg, "-A", "-v=6")
				if m := requestRE.FindStringSubmatch(out); err == nil && m != nil {
					return m[1], out
				}
			}
			_ = os.RemoveAll(cache)
			time.Sleep(100 * time.Millisecond)
		}
		return "", out
	}
	// The colliding kinds are there: a bare kind name does reach Cluster API's.
	if g, out := groupOf("explain", "ipaddressclaim"); g != "ipam.cluster.x-k8s.io" {
		t.Fatalf("kubectl explain ipaddressclaim reaches %q, not Cluster API's kind; the test would prove nothing:\n%s", g, out)
	}

	checked := map[string]string{}
	for _, c := range commands {
		verb, types := resourceArgs(c.line)
		for _, typ := range types {
			base := strings.ToLower(typ)
			if verb == "explain" {
				base, _, _ = strings.Cut(base, ".")
			}
			if categories[base] {
				if _, ok := checked["category "+base]; !ok {
					out, err := run("api-resources", "--categories="+base, "-o", "name")
					checked["category "+base] = out
					for _, r := range strings.Fields(out) {
						if err != nil || !strings.HasSuffix(r, "."+ourGroup) {
							t.Errorf("category %s lists %s (%v)", base, r, err)
						}
					}
				}
				continue
			}
			resource, _, _ := strings.Cut(strings.ToLower(typ), ".")
			if !names[resource] {
				continue // not this API's, nor one of its colliding names
			}
			key := verb + " " + typ
			if verb != "explain" {
				key = "get " + strings.ToLower(typ)
			}
			g, seen := checked[key]
			if !seen {
				var out string
				verbOf, arg, _ := strings.Cut(key, " ")
				g, out = groupOf(verbOf, arg)
				checked[key] = g
				if g != ourGroup {
					t.Logf("kubectl %s:\n%s", key, out)
				}
			}
			if g != ourGroup {
				t.Errorf("%s: %q names %s, which kubectl resolves to group %q beside Cluster API's IPAM kinds", c.where, c.line, typ, g)
			}
		}
	}
	if len(checked) < 3 {
		t.Fatalf("only %d resource names checked: the command extraction finds nothing", len(checked))
	}
	t.Logf("%d kubectl command lines, resource names checked: %v", len(commands), checked)
}
