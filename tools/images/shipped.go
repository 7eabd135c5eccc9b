package images

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

// ShippedFile is the one source of truth for the image references the checkout ships, relative
// to the checkout: image name → digest reference.
const ShippedFile = "images.yaml"

// Shipped maps each image name to the digest reference the checkout ships.
type Shipped map[string]string

// ReadShipped reads images.yaml and insists on a digest reference for every project image.
func ReadShipped(root string) (Shipped, error) {
	path := filepath.Join(root, ShippedFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Shipped
	if err := yaml.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, img := range Images {
		ref, ok := s[img.Name]
		if !ok {
			return nil, fmt.Errorf("%s names no reference for %s", path, img.Name)
		}
		if _, err := name.NewDigest(ref); err != nil {
			return nil, fmt.Errorf("%s: %s: %q is not a digest reference: %w", path, img.Name, ref, err)
		}
	}
	return s, nil
}

// WriteShipped rewrites the references in images.yaml, keeping its comments.
func WriteShipped(root string, s Shipped) error {
	path := filepath.Join(root, ShippedFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, n := range slices.Sorted(maps.Keys(s)) {
		re := regexp.MustCompile(`(?m)^(` + regexp.QuoteMeta(n) + `:[ \t]*).*$`)
		if !re.Match(data) {
			return fmt.Errorf("%s has no line for %s", path, n)
		}
		data = re.ReplaceAll(data, []byte("${1}"+escapeRepl(s[n])))
	}
	return writeAtomic(path, data)
}

// DerivedFiles lists every place (that exists) derived from images.yaml: the packages' wrapper
// values and the charts vendored into them, the charts' values, READMEs and the README templates
// helm-docs renders them from, the top README and the docs.
func DerivedFiles(root string) ([]string, error) {
	var out []string
	for _, pattern := range []string{
		"packages/system/*/values.yaml",
		"packages/system/*/charts/*/values.yaml",
		"packages/system/*/charts/*/README.md",
		"packages/system/*/charts/*/README.md.gotmpl",
		"charts/*/values.yaml",
		"charts/*/README.md",
		"charts/*/README.md.gotmpl",
		"README.md",
		"docs/*.md",
	} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return out, nil
}

// refPattern matches a digest reference of image n in any repository.
func refPattern(n string) *regexp.Regexp {
	return regexp.MustCompile(`[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9._-]+)*/` + regexp.QuoteMeta(n) +
		`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}`)
}

func repository(ref string) string {
	d, err := name.NewDigest(ref)
	if err != nil {
		return ""
	}
	return d.Context().Name()
}

// ImageRef is the reference an image value names: a string as it is, a map in cert-manager's
// shape (registry, repository, tag, digest) composed as the charts compose it; "" for anything else.
func ImageRef(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		part := func(k string) string { s, _ := x[k].(string); return s }
		ref := part("repository")
		if ref == "" {
			return ""
		}
		if r := part("registry"); r != "" {
			ref = strings.TrimSuffix(r, "/") + "/" + ref
		}
		if t := part("tag"); t != "" {
			ref += ":" + t
		}
		if d := part("digest"); d != "" {
			ref += "@" + d
		}
		return ref
	}
	return ""
}

// RefParts splits a reference registry/repository[:tag][@digest] into the parts of an image map.
func RefParts(ref string) (registry, repository, tag, digest string) {
	rest := ref
	if i := strings.Index(rest, "@"); i >= 0 {
		rest, digest = rest[:i], rest[i+1:]
	}
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		rest, tag = rest[:i], rest[i+1:]
	}
	registry, repository, _ = strings.Cut(rest, "/")
	return registry, repository, tag, digest
}

// setImageMap rewrites, in a values file's text, the registry, repository, tag and digest lines of
// the image map at key (each nesting level indented two spaces), keeping everything else.
func setImageMap(data []byte, key []string, ref string) ([]byte, error) {
	indent := strings.Repeat("  ", len(key)-1)
	lines := strings.Split(string(data), "\n")
	start := -1
	depth := 0
	for i, l := range lines {
		// Find the key path level by level, by indentation.
		if depth < len(key) && l == strings.Repeat("  ", depth)+key[depth]+":" {
			depth++
			if depth == len(key) {
				start = i
				break
			}
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no %s map", strings.Join(key, "."))
	}
	registry, repository, tag, digest := RefParts(ref)
	values := map[string]string{"registry": registry, "repository": repository, "tag": tag, "digest": digest}
	seen := map[string]bool{}
	for i := start + 1; i < len(lines) && strings.HasPrefix(lines[i], indent+"  "); i++ {
		field, _, ok := strings.Cut(strings.TrimPrefix(lines[i], indent+"  "), ":")
		if v, known := values[field]; ok && known {
			lines[i] = indent + "  " + field + ": " + v
			seen[field] = true
		}
	}
	if !seen["repository"] {
		return nil, fmt.Errorf("the %s map has no repository line", strings.Join(key, "."))
	}
	for _, f := range []string{"registry", "tag", "digest"} {
		if values[f] != "" && !seen[f] {
			return nil, fmt.Errorf("the %s map has no %s line for %s", strings.Join(key, "."), f, ref)
		}
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// imageValues are the structured places: the value that must equal the shipped reference in a
// values file, keyed by the file's path relative to root.
func imageValue(root, path string) (image string, key []string) {
	rel, _ := filepath.Rel(root, path)
	parts := strings.Split(filepath.ToSlash(rel), "/")
	switch {
	case len(parts) == 4 && parts[0] == "packages" && parts[3] == "values.yaml":
		return parts[2], []string{parts[2], "image"}
	case len(parts) == 6 && parts[0] == "packages" && parts[3] == "charts" && parts[5] == "values.yaml":
		return parts[4], []string{"image"}
	case len(parts) == 3 && parts[0] == "charts" && parts[2] == "values.yaml":
		return parts[1], []string{"image"}
	}
	return "", nil
}

// Sync derives every place from the references in to: each digest reference of a project image
// whose repository is the new one, the one in from, or the one an image value of a derived
// values file names, is replaced. References of other repositories (a mirror in an example) are
// left alone. It returns the files it changed.
func Sync(root string, from, to Shipped) ([]string, error) {
	files, err := DerivedFiles(root)
	if err != nil {
		return nil, err
	}
	repos := map[string][]string{}
	for _, img := range Images {
		repos[img.Name] = []string{repository(from[img.Name]), repository(to[img.Name])}
	}
	for _, f := range files {
		if img, key := imageValue(root, f); key != nil {
			if v, err := valueAt(f, key); err == nil {
				repos[img] = append(repos[img], repository(v))
			}
		}
	}
	var changed []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out := data
		if img, key := imageValue(root, f); key != nil && to[img] != "" {
			if isMap, err := mapAt(f, key); err != nil {
				return nil, err
			} else if isMap {
				v, _ := valueAt(f, key)
				if slices.Contains(repos[img], repository(v)) || v == "" {
					if out, err = setImageMap(out, key, to[img]); err != nil {
						return nil, fmt.Errorf("%s: %w", f, err)
					}
				}
			}
		}
		for _, img := range Images {
			repos := repos[img.Name]
			out = refPattern(img.Name).ReplaceAllFunc(out, func(m []byte) []byte {
				if slices.Contains(repos, repository(string(m))) {
					return []byte(to[img.Name])
				}
				return m
			})
		}
		if string(out) != string(data) {
			if err := writeAtomic(f, out); err != nil {
				return nil, err
			}
			changed = append(changed, f)
		}
	}
	stale, err := Stale(root, to)
	if err != nil {
		return nil, err
	}
	if len(stale) > 0 {
		return changed, fmt.Errorf("derived places still differ from %s after the update:\n  %s", ShippedFile, strings.Join(stale, "\n  "))
	}
	return changed, nil
}

// Stale lists the derived places that do not name the shipped references: an image value that
// differs, or a reference in the shipped repository with another tag or digest.
func Stale(root string, s Shipped) ([]string, error) {
	files, err := DerivedFiles(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if img, key := imageValue(root, f); key != nil && s[img] != "" {
			v, err := valueAt(f, key)
			if err != nil {
				return nil, err
			}
			if v != s[img] {
				out = append(out, fmt.Sprintf("%s: %s is %q, want %s", rel, strings.Join(key, "."), v, s[img]))
			}
		}
		for _, img := range Images {
			want := s[img.Name]
			for _, m := range refPattern(img.Name).FindAll(data, -1) {
				if string(m) != want && repository(string(m)) == repository(want) {
					out = append(out, fmt.Sprintf("%s: names %s, want %s", rel, m, want))
				}
			}
		}
	}
	return out, nil
}

// valueAt reads the image reference at key in a YAML file, a string or an image map ("" when absent).
func valueAt(path string, key []string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	var v any = values
	for _, k := range key {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return ImageRef(v), nil
}

// mapAt says whether the value at key in a YAML file is a map.
func mapAt(path string, key []string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	var v any = values
	for _, k := range key {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	_, ok := v.(map[string]any)
	return ok, nil
}

func writeAtomic(path string, data []byte) error {
	info, err := os.Stat(path)
	mode := os.FileMode(0o644)
	if err == nil {
		mode = info.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func escapeRepl(s string) string { return strings.ReplaceAll(s, "$", "$$") }
