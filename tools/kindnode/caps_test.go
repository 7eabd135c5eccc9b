package kindnode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestDropCapabilityFromABundleAndAProcess(t *testing.T) {
	bundle := `{"ociVersion":"1.0.2","process":{"user":{"uid":0},"rlimits":[{"type":"RLIMIT_NOFILE","hard":1048576,"soft":1048576}],` +
		`"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_NET_ADMIN"],"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_CHOWN"]}},"root":{"path":"rootfs"}}`
	out, changed, err := DropCapability([]byte(bundle), "CAP_SYS_RESOURCE")
	if err != nil || !changed {
		t.Fatalf("changed=%v err=%v", changed, err)
	}
	var doc struct {
		Process struct {
			Capabilities map[string][]string
			Rlimits      []map[string]any
		}
		Root map[string]any
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"bounding": {"CAP_CHOWN", "CAP_NET_ADMIN"}, "effective": {}, "permitted": {"CAP_CHOWN"}}
	if !reflect.DeepEqual(doc.Process.Capabilities, want) {
		t.Fatalf("capabilities %v, want %v", doc.Process.Capabilities, want)
	}
	if string(mustJSON(t, doc.Process.Rlimits[0]["hard"])) != "1048576" || doc.Root["path"] != "rootfs" {
		t.Fatalf("other fields changed: %s", out)
	}
	// An exec's process spec is the process object itself.
	proc := `{"args":["sh"],"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_KILL"]}}`
	out, changed, err = DropCapability([]byte(proc), "CAP_SYS_RESOURCE")
	if err != nil || !changed || string(out) != `{"args":["sh"],"capabilities":{"bounding":["CAP_KILL"]}}` {
		t.Fatalf("process spec: %s changed=%v err=%v", out, changed, err)
	}
	// Nothing to drop: the bytes are left as they were.
	same := `{"process": {"capabilities": {"bounding": ["CAP_KILL"]}}}`
	out, changed, err = DropCapability([]byte(same), "CAP_SYS_RESOURCE")
	if err != nil || changed || string(out) != same {
		t.Fatalf("unchanged spec rewritten: %s", out)
	}
	if _, _, err := DropCapability([]byte("not json"), "CAP_SYS_RESOURCE"); err == nil {
		t.Fatal("a broken spec was accepted")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRuncSpecFile(t *testing.T) {
	wd, _ := os.Getwd()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", "/run/r", "--log", "/l", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, "/b/config.json"},
		{[]string{"--systemd-cgroup", "create", "-b=/b2", "id"}, "/b2/config.json"},
		{[]string{"run", "id"}, filepath.Join(wd, "config.json")},
		{[]string{"--root", "/r", "exec", "--process", "/tmp/p.json", "--detach", "id"}, "/tmp/p.json"},
		{[]string{"exec", "id", "sh"}, ""},
		{[]string{"--root", "/r", "start", "id"}, ""},
		{[]string{"--version"}, ""},
	} {
		got, err := RuncSpecFile(c.args)
		if err != nil || got != c.want {
			t.Errorf("%v: %q (%v), want %q", c.args, got, err, c.want)
		}
	}
}

func TestDropCapabilityInFileKeepsTheFileMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(`{"process":{"capabilities":{"bounding":["CAP_SYS_RESOURCE"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := DropCapabilityInFile(p, "CAP_SYS_RESOURCE"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	info, _ := os.Stat(p)
	if string(data) != `{"process":{"capabilities":{"bounding":[]}}}` || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s %v", data, info.Mode())
	}
}
