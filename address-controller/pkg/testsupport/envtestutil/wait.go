package envtestutil

import (
	"testing"
	"time"
)

// Eventually polls cond every interval until it is true, for at most limit, and fails t saying
// what it waited for and the last error cond returned. An error does not end the wait: an object
// not there yet is a reason to look again. It is the one wait of the controller suites; each
// suite's eventually gives it the suite's default limit.
func Eventually(t testing.TB, limit, interval time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(limit); ; time.Sleep(interval) {
		ok, err := cond()
		if err == nil && ok {
			return
		}
		if err != nil {
			last = err
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
		}
	}
}

// Consistently checks cond every interval for d and fails t at the first false (or error).
func Consistently(t testing.TB, d, interval time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(interval) {
		if ok, err := cond(); err != nil || !ok {
			t.Fatalf("expected %s to hold for %s (err: %v)", what, d, err)
		}
	}
}
