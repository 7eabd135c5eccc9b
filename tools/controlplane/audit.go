package controlplane

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"time"
)

// AuditEvent is the part of an audit log entry the project reads.
type AuditEvent struct {
	Verb       string    `json:"verb"`
	Stamp      time.Time `json:"requestReceivedTimestamp"`
	RequestURI string    `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// AuditLogMaxSizeMB is the size at which the apiserver would rotate its audit log: large enough
// never to happen in a test or a benchmark run (the apiserver's default, 100 MB, does during a
// 10,000-object benchmark, and a reader's offsets then point into the wrong file).
const AuditLogMaxSizeMB = 50000

// AuditWrites reads the write requests recorded so far in an audit log, keeping those for
// which keep returns true (all when keep is nil).
func AuditWrites(path string, keep func(AuditEvent) bool) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var ev AuditEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			continue // a line being written right now
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
		default:
			continue
		}
		if keep == nil || keep(ev) {
			out = append(out, ev)
		}
	}
	return out, sc.Err()
}
