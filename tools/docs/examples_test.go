package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// The pages whose YAML and annotation names are checked against the code.
var userPages = []string{"docs/tenant-guide.md", "docs/troubleshooting.md", "docs/concepts.md", "docs/operating-guide.md"}

// Every local.sdn.cozystack.io object in the documentation's YAML blocks, and in examples/, uses
// only fields the CRDs define, with values their enums allow.
func TestDocumentedObjectsMatchTheCRDs(t *testing.T) {
	root := filepath.Join("..", "..")
	crds := loadCRDs(t, root)
	var sources []string
	md, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	sources = append(sources, md...)
	ex, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	for _, f := range ex {
		rel, _ := filepath.Rel(root, f)
		sources = append(sources, filepath.ToSlash(rel))
	}
	checked := 0
	for _, src := range sources {
		data, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		blocks := []string{string(data)}
		if strings.HasSuffix(src, ".md") {
			blocks = yamlBlocks(string(data))
		}
		for _, b := range blocks {
			for _, doc := range docSeparator.Split(b, -1) {
				var obj map[string]any
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj == nil {
					continue // a fragment of values, or not YAML at all
				}
				api, _ := obj["apiVersion"].(string)
				if !strings.HasPrefix(api, "local.sdn.cozystack.io/") {
					continue
				}
				kind, _ := obj["kind"].(string)
				schema, ok := crds[api+"/"+kind]
				if !ok {
					t.Errorf("%s: %s %s is not a kind the CRDs serve", src, api, kind)
					continue
				}
				for k, v := range obj {
					if k == "apiVersion" || k == "kind" || k == "metadata" {
						continue
					}
					for _, e := range checkAgainst(schema, k, v) {
						t.Errorf("%s: %s: %s", src, kind, e)
					}
				}
				checked++
			}
		}
	}
	t.Logf("checked %d objects", checked)
	if checked < 5 {
		t.Fatalf("only %d objects checked: the YAML blocks are no longer found", checked)
	}
}

// The check rejects an unknown field and a value outside an enum.
func TestCRDCheckRejectsWhatTheCRDLacks(t *testing.T) {
	crds := loadCRDs(t, filepath.Join("..", ".."))
	schema := crds["local.sdn.cozystack.io/v1alpha1/IPAddressClaim"]
	if errs := checkAgainst(schema, "spec", map[string]any{"className": "public", "family": "Dual"}); len(errs) != 0 {
		t.Fatalf("a valid spec is refused: %v", errs)
	}
	if errs := checkAgainst(schema, "spec", map[string]any{"class": "public"}); len(errs) != 1 {
		t.Fatalf("an unknown field gives %v", errs)
	}
	if errs := checkAgainst(schema, "spec", map[string]any{"family": "IPv5"}); len(errs) != 1 {
		t.Fatalf("a value outside the enum gives %v", errs)
	}
}

// Every annotation, label or finalizer of the API's domain that the user pages name is one the
// code defines, so a page cannot teach a mistyped or renamed key.
func TestDocumentedKeysAreDefinedByTheCode(t *testing.T) {
	root := filepath.Join("..", "..")
	known := map[string]bool{"local.sdn.cozystack.io/v1alpha1": true}
	for _, f := range []string{"address-controller/api/v1alpha1/wellknown.go", "metallb-iad/internal/driver/plan/names.go"} {
		for _, v := range stringConstants(t, filepath.Join(root, f)) {
			known[v] = true
		}
	}
	key := regexp.MustCompile(`(?:^|[^a-z0-9.-])((?:ipaddressclass\.|metallb\.drivers\.)?local\.sdn\.cozystack\.io/[a-z0-9-]*[a-z0-9])`)
	seen := 0
	for _, p := range userPages {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range key.FindAllStringSubmatch(string(data), -1) {
			seen++
			if !known[m[1]] {
				t.Errorf("%s names %s, which the code does not define", p, m[1])
			}
		}
	}
	if seen < 20 {
		t.Fatalf("only %d keys found in the pages", seen)
	}
}

func loadCRDs(t *testing.T, root string) map[string]*apiextensionsv1.JSONSchemaProps {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "charts", "address-controller", "files", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs: %v", err)
	}
	out := map[string]*apiextensionsv1.JSONSchemaProps{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			out[crd.Spec.Group+"/"+v.Name+"/"+crd.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema
		}
	}
	return out
}

// checkAgainst checks value, the field name of schema's object, against the field's schema.
func checkAgainst(schema *apiextensionsv1.JSONSchemaProps, name string, value any) []string {
	p, ok := schema.Properties[name]
	if !ok {
		return []string{fmt.Sprintf("field %s is not in the CRD", name)}
	}
	return checkValue(&p, name, value)
}

func checkValue(p *apiextensionsv1.JSONSchemaProps, path string, value any) []string {
	var errs []string
	switch v := value.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch child, ok := p.Properties[k]; {
			case ok:
				errs = append(errs, checkValue(&child, path+"."+k, v[k])...)
			case p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil:
				errs = append(errs, checkValue(p.AdditionalProperties.Schema, path+"."+k, v[k])...)
			case p.AdditionalProperties != nil && p.AdditionalProperties.Allows:
			case p.XPreserveUnknownFields != nil && *p.XPreserveUnknownFields:
			default:
				errs = append(errs, fmt.Sprintf("field %s.%s is not in the CRD", path, k))
			}
		}
	case []any:
		if p.Items != nil && p.Items.Schema != nil {
			for i, item := range v {
				errs = append(errs, checkValue(p.Items.Schema, fmt.Sprintf("%s[%d]", path, i), item)...)
			}
		}
	case string:
		if len(p.Enum) > 0 {
			var allowed []string
			for _, e := range p.Enum {
				var s string
				if yaml.Unmarshal(e.Raw, &s) == nil {
					allowed = append(allowed, s)
				}
			}
			if !slices.Contains(allowed, v) {
				errs = append(errs, fmt.Sprintf("%s is %q, not one of %v", path, v, allowed))
			}
		}
	}
	return errs
}

// yamlBlocks returns the YAML of a Markdown page: its fenced yaml blocks, and the
// here-documents (<<'YAML' … YAML) of its other fenced blocks.
func yamlBlocks(md string) []string {
	heredoc := regexp.MustCompile(`<<-?\s*['"]?([A-Z]+)['"]?\s*$`)
	var out []string
	for _, b := range parsePage(md).codeBlocks() {
		if b.lang == "yaml" || b.lang == "yml" {
			out = append(out, b.text)
			continue
		}
		var cur []string
		end := ""
		for _, l := range strings.Split(b.text, "\n") {
			switch {
			case end != "" && strings.TrimSpace(l) == end:
				out = append(out, strings.Join(cur, "\n"))
				end = ""
			case end != "":
				cur = append(cur, l)
			default:
				if m := heredoc.FindStringSubmatch(l); m != nil {
					end, cur = m[1], nil
				}
			}
		}
	}
	return out
}

// stringConstants returns the values of the string constants a Go file declares.
func stringConstants(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// labelSelector: the schema is a metav1.LabelSelector's (matchLabels and matchExpressions).
func labelSelector(p apiextensionsv1.JSONSchemaProps) bool {
	_, labels := p.Properties["matchLabels"]
	_, exprs := p.Properties["matchExpressions"]
	return len(p.Properties) == 2 && labels && exprs
}

// docs/api-reference.md (make api-docs) documents every kind and every field the CRDs serve, so a
// field added to the Go types without regenerating the reference fails here too, not only in
// make test's freshness check.
func TestAPIReferenceCoversEveryCRDField(t *testing.T) {
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "docs", "api-reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	ref := string(data)
	if !strings.HasPrefix(ref, "<!-- Generated by crd-ref-docs") {
		t.Error("docs/api-reference.md does not start with the generator's note: regenerate it with make api-docs")
	}
	var walk func(path string, p apiextensionsv1.JSONSchemaProps)
	walk = func(path string, p apiextensionsv1.JSONSchemaProps) {
		for name, child := range p.Properties {
			if !strings.Contains(ref, "| `"+name+"` ") {
				t.Errorf("docs/api-reference.md lacks field %s.%s: run make api-docs", path, name)
			}
			// metav1.Condition and metav1.LabelSelector: Kubernetes' own types, linked, not repeated.
			if name != "conditions" && !labelSelector(child) {
				walk(path+"."+name, child)
			}
		}
		if p.Items != nil && p.Items.Schema != nil && p.Items.Schema.Properties != nil && path != "" && !labelSelector(*p.Items.Schema) {
			walk(path+"[]", *p.Items.Schema)
		}
	}
	for key, schema := range loadCRDs(t, root) {
		kind := key[strings.LastIndex(key, "/")+1:]
		if !strings.Contains(ref, "\n#### "+kind+"\n") {
			t.Errorf("docs/api-reference.md has no section for %s", kind)
		}
		for _, top := range []string{"spec", "status"} {
			if p, ok := schema.Properties[top]; ok {
				walk(kind+"."+top, p)
			}
		}
	}
}
