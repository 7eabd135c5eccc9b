package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat (100 on every
// Linux architecture Go supports).
const clockTicks = 100

// ProcStat is what /proc says about one process.
type ProcStat struct {
	// CPUSeconds is user plus system time since the process started.
	CPUSeconds float64
	// RSSBytes is the resident set now; PeakRSSBytes the most it ever was (VmHWM).
	RSSBytes, PeakRSSBytes int64
}

// ReadProc reads /proc/<pid>/stat and /proc/<pid>/status.
func ReadProc(pid int) (ProcStat, error) {
	var st ProcStat
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	if st.CPUSeconds, err = parseStatCPU(stat); err != nil {
		return st, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	st.RSSBytes, st.PeakRSSBytes = parseStatusRSS(status)
	return st, nil
}

// parseStatCPU reads utime and stime (fields 14 and 15) of /proc/<pid>/stat. The command
// name (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
func parseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed stat: %d fields", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed stat times %q %q", f[11], f[12])
	}
	return float64(u+s) / clockTicks, nil
}

// parseStatusRSS reads VmRSS and VmHWM (kB) of /proc/<pid>/status, in bytes.
func parseStatusRSS(status []byte) (rss, peak int64) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = v * 1024
		case "VmHWM:":
			peak = v * 1024
		}
	}
	return rss, peak
}

// loadAvg returns the one-minute load average.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
