package v1alpha1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Every field of the generated CRDs carries a description, so `kubectl explain` helps on each.
func TestEveryCRDFieldIsDescribed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "*.yaml"))
	if err != nil || len(files) != 3 {
		t.Fatalf("CRD files %v (%v), want 3", files, err)
	}
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
			schema := v.Schema.OpenAPIV3Schema
			for _, top := range []string{"spec", "status"} {
				if p, ok := schema.Properties[top]; ok {
					walkDescribed(t, crd.Spec.Names.Kind+"."+top, p)
				}
			}
		}
	}
}

func walkDescribed(t *testing.T, path string, p apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if strings.TrimSpace(p.Description) == "" {
		t.Errorf("%s has no description", path)
	}
	for name, child := range p.Properties {
		walkDescribed(t, path+"."+name, child)
	}
	if p.Items != nil && p.Items.Schema != nil {
		for name, child := range p.Items.Schema.Properties {
			walkDescribed(t, path+"[]."+name, child)
		}
	}
}

// The claim's fields say what the tenant most needs to know: the class and the named address
// cannot change, and a named address without a class brings its own class.
func TestClaimFieldDocsStateImmutabilityAndClassFallback(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "local.sdn.cozystack.io_ipaddressclaims.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	for _, field := range []string{"className", "addressName", "family"} {
		if !strings.Contains(strings.ToLower(spec[field].Description), "immutable") {
			t.Errorf("spec.%s does not say it is immutable: %q", field, spec[field].Description)
		}
	}
	if d := spec["addressName"].Description; !strings.Contains(d, "class of") {
		t.Errorf("spec.addressName does not say a claim without className takes the address's class: %q", d)
	}
}
