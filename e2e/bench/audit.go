package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// Identities the audit log knows the writers by, as the sandbox runs them.
const (
	IdentityCore    = "address-controller"
	IdentityDriver  = "metallb-iad"
	IdentityMetalLB = "metallb"
	IdentityBench   = "bench-client"
	IdentityKCM     = "kube-controller-manager"
)

// identityOf shortens an apiserver username to the component it stands for.
func identityOf(username string) string {
	switch username {
	case "system:serviceaccount:cozy-address-controller:address-controller":
		return IdentityCore
	case "system:serviceaccount:cozy-metallb-iad:metallb-iad":
		return IdentityDriver
	case controlplane.MetalLBUser(controlplane.DefaultMetalLBNamespace):
		return IdentityMetalLB
	case "local-admin":
		return IdentityBench
	case "system:kube-controller-manager":
		return IdentityKCM
	}
	return username
}

// isProjectIdentity says whether writes of that identity count against the project's write
// budget (docs/design.md#the-write-budget): the core's and the driver's ServiceAccounts.
func isProjectIdentity(id string) bool { return id == IdentityCore || id == IdentityDriver }

// auditLine is the part of an audit event (JSON, one per line) the benchmark reads.
type auditLine struct {
	Verb  string    `json:"verb"`
	Stamp time.Time `json:"requestReceivedTimestamp"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Write is one write request as the audit log recorded it.
type Write struct {
	Identity string
	Verb     string
	// Resource is "resource" or "resource/subresource".
	Resource string
	Code     int
	Stamp    time.Time
	// Target groups the object written: its namespace, and in the benchmark's namespace the
	// name without its number ("bench/plain-"), so that writes to the benchmark's own objects
	// can be told from writes to others.
	Target string
}

// targetGroup names the group of an object for Write.Target.
func targetGroup(namespace, name string) string {
	if namespace != Namespace {
		return namespace
	}
	return namespace + "/" + strings.TrimRight(name, "0123456789")
}

// WriteRow is one line of a write breakdown.
type WriteRow struct {
	Identity string `json:"identity"`
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
	Code     int    `json:"code"`
	Count    int    `json:"count"`
}

// WriteRate is how fast one identity wrote during a step.
type WriteRate struct {
	Total int `json:"total"`
	// PerSecond is Total over the step's duration.
	PerSecond float64 `json:"perSecond"`
	// Peak is the most writes seen in one wall-clock second: a flat peak near a client's QPS
	// setting means that client's rate limiter, not the server, set the pace.
	Peak int `json:"peakPerSecond"`
	// InPhase counts the writes from the step's first create to its last object done, and
	// InPhasePerSecond is their rate: the pace while objects were waiting.
	InPhase          int     `json:"inPhase"`
	InPhasePerSecond float64 `json:"inPhasePerSecond"`
}

// WriteSummary is the audit log's account of one step.
type WriteSummary struct {
	Rows       []WriteRow           `json:"rows"`
	ByIdentity map[string]WriteRate `json:"byIdentity"`
	// Project is every write of the core and the driver except leader-election Lease renewals
	// (which go on whether or not there is work), events included.
	Project int `json:"project"`
	// Leases are the Lease writes of the core and the driver (leader election), left out of
	// Project.
	Leases int `json:"projectLeases"`
}

// isWriteVerb keeps the verbs that change state.
func isWriteVerb(v string) bool {
	switch v {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// ReadWrites parses the audit log between two byte offsets (end < 0: to the end of the
// file). A start that falls inside a line skips to the next one, so offsets taken while the
// apiserver writes are safe.
func ReadWrites(path string, start, end int64) ([]Write, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if st.Size() < max(start, end) {
		return nil, fmt.Errorf("%s is %d bytes, shorter than offset %d: the apiserver rotated it (raise its --audit-log-maxsize)",
			path, st.Size(), max(start, end))
	}
	return parseWrites(f, start, end)
}

func parseWrites(f io.ReadSeeker, start, end int64) ([]Write, error) {
	skipPartial := false
	if start > 0 {
		if _, err := f.Seek(start-1, io.SeekStart); err != nil {
			return nil, err
		}
		var b [1]byte
		if _, err := io.ReadFull(f, b[:]); err != nil {
			return nil, err
		}
		skipPartial = b[0] != '\n'
	}
	var r io.Reader = f
	if end >= 0 {
		r = io.LimitReader(f, end-start)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []Write
	for sc.Scan() {
		if skipPartial {
			skipPartial = false
			continue
		}
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev auditLine
		if err := json.Unmarshal(line, &ev); err != nil {
			continue // the last line, still being written
		}
		if !isWriteVerb(ev.Verb) {
			continue
		}
		w := Write{Identity: identityOf(ev.User.Username), Verb: ev.Verb, Stamp: ev.Stamp}
		if ev.ObjectRef != nil {
			w.Resource = ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				w.Resource += "/" + ev.ObjectRef.Subresource
			}
			w.Target = targetGroup(ev.ObjectRef.Namespace, ev.ObjectRef.Name)
		}
		if ev.ResponseStatus != nil {
			w.Code = ev.ResponseStatus.Code
		}
		out = append(out, w)
	}
	return out, sc.Err()
}

// SummarizeWrites breaks writes down by identity, verb, resource and response code, and
// computes each identity's rate over a step's window that lasted d, and over its timed part
// from phaseStart to phaseEnd.
func SummarizeWrites(writes []Write, d time.Duration, phaseStart, phaseEnd time.Time) WriteSummary {
	type key struct {
		id, verb, res string
		code          int
	}
	rows := map[key]int{}
	perSecond := map[string]map[int64]int{}
	inPhase := map[string]int{}
	s := WriteSummary{ByIdentity: map[string]WriteRate{}}
	for _, w := range writes {
		rows[key{w.Identity, w.Verb, w.Resource, w.Code}]++
		if perSecond[w.Identity] == nil {
			perSecond[w.Identity] = map[int64]int{}
		}
		perSecond[w.Identity][w.Stamp.Unix()]++
		if !w.Stamp.Before(phaseStart) && !w.Stamp.After(phaseEnd) {
			inPhase[w.Identity]++
		}
		if isProjectIdentity(w.Identity) {
			if w.Resource == "leases" {
				s.Leases++
			} else {
				s.Project++
			}
		}
	}
	for k, n := range rows {
		s.Rows = append(s.Rows, WriteRow{Identity: k.id, Verb: k.verb, Resource: k.res, Code: k.code, Count: n})
	}
	sort.Slice(s.Rows, func(i, j int) bool {
		a, b := s.Rows[i], s.Rows[j]
		if a.Identity != b.Identity {
			return a.Identity < b.Identity
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Verb+a.Resource+strconv.Itoa(a.Code) < b.Verb+b.Resource+strconv.Itoa(b.Code)
	})
	for id, secs := range perSecond {
		r := WriteRate{}
		for _, n := range secs {
			r.Total += n
			r.Peak = max(r.Peak, n)
		}
		if d > 0 {
			r.PerSecond = float64(r.Total) / d.Seconds()
		}
		r.InPhase = inPhase[id]
		if span := phaseEnd.Sub(phaseStart); span > 0 {
			r.InPhasePerSecond = float64(r.InPhase) / span.Seconds()
		}
		s.ByIdentity[id] = r
	}
	return s
}

// rowLabel is how a breakdown row reads in the text report.
func (r WriteRow) rowLabel() string {
	return strings.Join([]string{r.Verb, r.Resource, strconv.Itoa(r.Code)}, " ")
}

// StatusWrites describes MetalLB's writes of Service status during a step: how many went to
// which group of Services, and its pace per second while objects were waiting. Its controller
// writes every Service status through one client whose rate limiter is controller-runtime's
// default (20 requests/s, burst 30; MetalLB has no flag for it), so a median pace of 20/s
// means that limiter set the pace.
type StatusWrites struct {
	ByTarget map[string]int `json:"byTarget"`
	// Conflicts are the writes answered 409.
	Conflicts int `json:"conflicts"`
	// MedianPerSecond is the median of the per-second counts over the timed part.
	MedianPerSecond float64 `json:"medianPerSecond"`
}

// MetalLBStatusWrites summarizes MetalLB's Service status writes between phaseStart and
// phaseEnd (the timed part) for the rate, and over all writes for the targets.
func MetalLBStatusWrites(writes []Write, phaseStart, phaseEnd time.Time) StatusWrites {
	s := StatusWrites{ByTarget: map[string]int{}}
	perSecond := map[int64]int{}
	for _, w := range writes {
		if w.Identity != IdentityMetalLB || w.Resource != "services/status" {
			continue
		}
		s.ByTarget[w.Target]++
		if w.Code == 409 {
			s.Conflicts++
		}
		if !w.Stamp.Before(phaseStart) && !w.Stamp.After(phaseEnd) {
			perSecond[w.Stamp.Unix()]++
		}
	}
	// Whole seconds inside the timed part only; a second with no write counts as zero.
	var counts []int
	for sec := phaseStart.Unix() + 1; sec < phaseEnd.Unix(); sec++ {
		counts = append(counts, perSecond[sec])
	}
	if len(counts) > 0 {
		sort.Ints(counts)
		mid := len(counts) / 2
		if len(counts)%2 == 1 {
			s.MedianPerSecond = float64(counts[mid])
		} else {
			s.MedianPerSecond = float64(counts[mid-1]+counts[mid]) / 2
		}
	}
	return s
}
