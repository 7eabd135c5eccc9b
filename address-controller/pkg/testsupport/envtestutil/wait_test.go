package envtestutil

import (
	"errors"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func run(f func(t testing.TB)) (failed bool) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil {
			if p != r {
				panic(p)
			}
			failed = true
		}
	}()
	f(r)
	return false
}

func TestEventually(t *testing.T) {
	n := 0
	if run(func(t testing.TB) {
		Eventually(t, time.Second, time.Millisecond, "the third look", func() (bool, error) { n++; return n >= 3, nil })
	}) || n != 3 {
		t.Fatalf("a condition true at the third look failed the wait or was looked at %d times", n)
	}
	if !run(func(t testing.TB) {
		Eventually(t, 20*time.Millisecond, time.Millisecond, "never", func() (bool, error) { return false, errors.New("not yet") })
	}) {
		t.Fatal("a condition never true did not fail the wait")
	}
}

func TestConsistently(t *testing.T) {
	if run(func(t testing.TB) {
		Consistently(t, 10*time.Millisecond, time.Millisecond, "always", func() (bool, error) { return true, nil })
	}) {
		t.Fatal("a condition always true failed")
	}
	n := 0
	if !run(func(t testing.TB) {
		Consistently(t, time.Second, time.Millisecond, "until the third look", func() (bool, error) { n++; return n < 3, nil })
	}) {
		t.Fatal("a condition that turns false did not fail")
	}
}
