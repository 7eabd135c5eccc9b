package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
)

// MetalLBWork is what MetalLB's controller logged during a step. Its controller reconciles
// each kind with one worker and logs "start reconcile" for each (at its default info level),
// so the log is the only place its reconciles can be counted: it serves no
// controller-runtime metrics.
type MetalLBWork struct {
	// Reconciles by kind: "service" (one Service), "reprocess-all" (every Service, after an
	// assigned Service went away or a sharing key changed), "pool-status" (an IPAddressPool's
	// status counters, woken for each pool whenever an allocation changes), and "config",
	// "pool", "node" and others by MetalLB's controller name.
	Reconciles map[string]int `json:"reconciles"`
	// Total reconciles.
	Total int `json:"total"`
	// Events counts the "event" field of its log lines: serviceUpdated (an assignment it wrote,
	// or found nothing to write), ipAllocated, clearAssignment, serviceDeleted and so on.
	Events map[string]int `json:"events"`
	// StatusWrites are the handler passes that ended in a Service status write, and Unchanged
	// those that found nothing to write (each pass of reprocess-all logs one per Service).
	StatusWrites int `json:"serviceStatusWrites"`
	Unchanged    int `json:"handlerPassesUnchanged"`
}

// ReadMetalLBWork reads MetalLB's controller log between two byte offsets (end < 0: to the end).
func ReadMetalLBWork(path string, start, end int64) (MetalLBWork, error) {
	f, err := os.Open(path)
	if err != nil {
		return MetalLBWork{}, err
	}
	defer f.Close()
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return MetalLBWork{}, err
	}
	var r io.Reader = f
	if end >= 0 {
		r = io.LimitReader(f, end-start)
	}
	return parseMetalLBLog(r)
}

// metallbKind names the kind of work a MetalLB reconcile did, from its controller field and
// the request key.
func metallbKind(controller, key string) string {
	switch controller {
	case "ServiceReconciler":
		if key == "metallbreload/reload" {
			return "reprocess-all"
		}
		return "service"
	case "ServiceReconciler - reprocessAll":
		return "reprocess-all"
	case "PoolStatusReconciler":
		return "pool-status"
	case "ConfigReconciler":
		return "config"
	case "PoolReconciler":
		return "pool"
	case "NodeReconciler":
		return "node"
	}
	return controller
}

func parseMetalLBLog(r io.Reader) (MetalLBWork, error) {
	w := MetalLBWork{Reconciles: map[string]int{}, Events: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			continue
		}
		if key, ok := m["start reconcile"].(string); ok {
			ctrl, _ := m["controller"].(string)
			w.Reconciles[metallbKind(ctrl, key)]++
			w.Total++
			continue
		}
		ev, _ := m["event"].(string)
		if ev == "" {
			continue
		}
		w.Events[ev]++
		if ev == "serviceUpdated" {
			msg, _ := m["msg"].(string)
			switch {
			case strings.Contains(msg, "updated service object"):
				w.StatusWrites++
			case strings.Contains(msg, "not updated"):
				w.Unchanged++
			}
		}
	}
	return w, sc.Err()
}
