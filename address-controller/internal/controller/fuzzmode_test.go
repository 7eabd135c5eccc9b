package controller

import "flag"

// fuzzing reports whether this test binary runs as a fuzzer (`go test -fuzz`, its coordinator
// or a worker). Fuzz targets here are pure, so the envtest control plane is not started: each
// fuzz worker is its own process and would otherwise start one.
func fuzzing() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}
