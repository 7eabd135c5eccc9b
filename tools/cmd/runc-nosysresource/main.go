// Command runc-nosysresource is an OCI runtime for dockerd on a machine whose capability bounding
// set lacks CAP_SYS_RESOURCE (a small VM): it removes that capability from the container's
// process (the bundle's config.json for create and run, the --process spec for exec) and runs
// runc. A privileged container (kind's nodes are) asks for every capability, and runc fails to
// grant one the bounding set lacks ("unable to apply caps"). On a machine whose bounding set has
// it the wrapper changes nothing.
//
//	dockerd --add-runtime nosysresource=/path/to/runc-nosysresource --default-runtime nosysresource
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/cozystack/reserved-ips/tools/kindnode"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "runc-nosysresource:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	runc := os.Getenv("RUNC_NOSYSRESOURCE_RUNC")
	if runc == "" {
		var err error
		if runc, err = exec.LookPath("runc"); err != nil {
			return err
		}
	}
	if kindnode.BoundingSetHas(kindnode.CapSysResource) {
		return syscall.Exec(runc, append([]string{runc}, args[1:]...), os.Environ())
	}
	spec, err := kindnode.RuncSpecFile(args[1:])
	if err != nil {
		return err
	}
	if spec != "" {
		if err := kindnode.DropCapabilityInFile(spec, "CAP_SYS_RESOURCE"); err != nil {
			return fmt.Errorf("editing %s: %w", filepath.Base(spec), err)
		}
	}
	return syscall.Exec(runc, append([]string{runc}, args[1:]...), os.Environ())
}
