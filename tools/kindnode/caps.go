package kindnode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CapSysResource is the capability's number (linux/capability.h).
const CapSysResource = 24

// BoundingSetHas reports whether this process's capability bounding set holds capability n.
func BoundingSetHas(n uint) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true // cannot tell: leave the spec alone
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return true
			}
			return set&(1<<n) != 0
		}
	}
	return true
}

// RuncSpecFile returns the process spec a runc command line reads: the bundle's config.json for
// create and run (--bundle or -b, else the working directory), the --process file for exec, and
// "" for every other command (or an exec given its process on the command line).
func RuncSpecFile(args []string) (string, error) {
	// Global flags come before the command; those that take a value are the ones below.
	takesValue := map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		if takesValue[args[i]] {
			i++
		}
		i++
	}
	if i >= len(args) {
		return "", nil
	}
	cmd, rest := args[i], args[i+1:]
	value := func(names ...string) string {
		for j, a := range rest {
			for _, n := range names {
				if a == n && j+1 < len(rest) {
					return rest[j+1]
				}
				if v, ok := strings.CutPrefix(a, n+"="); ok {
					return v
				}
			}
		}
		return ""
	}
	switch cmd {
	case "create", "run":
		bundle := value("--bundle", "-b")
		if bundle == "" {
			wd, err := os.Getwd()
			if err != nil {
				return "", err
			}
			bundle = wd
		}
		return filepath.Join(bundle, "config.json"), nil
	case "exec":
		return value("--process", "-p"), nil
	}
	return "", nil
}

// DropCapabilityInFile removes capability from every capability set of the OCI spec in path: a
// bundle's config.json (with a "process" object) or an exec's process spec (the process itself).
func DropCapabilityInFile(path, capability string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, changed, err := DropCapability(data, capability)
	if err != nil || !changed {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, info.Mode().Perm())
}

// DropCapability removes capability from the capability sets of an OCI runtime spec or process
// spec, keeping every other field as it was (numbers included). changed is false when no set
// held it.
func DropCapability(spec []byte, capability string) (out []byte, changed bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, false, fmt.Errorf("not an OCI spec: %w", err)
	}
	process := doc
	if p, ok := doc["process"].(map[string]any); ok {
		process = p
	}
	caps, ok := process["capabilities"].(map[string]any)
	if !ok {
		return spec, false, nil
	}
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := list[:0:0]
		for _, c := range list {
			if c == capability {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	if !changed {
		return spec, false, nil
	}
	out, err = json.Marshal(doc)
	return out, true, err
}
