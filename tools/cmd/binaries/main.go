// Command binaries builds the pinned control-plane binaries into the cache and prints where they
// are.
//
//	binaries build [component...]   build what is missing (all components by default)
//	binaries path COMMAND            print the path of a built command (kubectl, etcd, ...)
//	binaries dir COMPONENT           print the cache directory of a component
//	binaries source COMPONENT DIR    write a patched component's source into DIR (absent or empty)
//	binaries envtest                 print a directory usable as KUBEBUILDER_ASSETS
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

func main() {
	pins := flag.String("pins", "", "directory of the pin modules (default: tools/binaries next to this command's source)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: binaries [-pins DIR] build [component...] | path COMMAND | dir COMPONENT | source COMPONENT DIR | envtest\ncomponents: %s (metallb@<version>, metallb@<version>+patched)\n", names())
	}
	flag.Parse()
	if err := run(*pins, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "binaries:", err)
		os.Exit(1)
	}
}

func run(pins string, args []string) error {
	if len(args) == 0 {
		flag.Usage()
		return fmt.Errorf("no subcommand")
	}
	if pins == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		pins = filepath.Join(wd, "tools", "binaries")
	}
	switch args[0] {
	case "build":
		comps := binaries.All
		if len(args) > 1 {
			comps = nil
			for _, n := range args[1:] {
				c, ok := binaries.ByName(n)
				if !ok {
					return fmt.Errorf("unknown component %q (known: %s)", n, names())
				}
				comps = append(comps, c)
			}
		}
		b := &binaries.Builder{PinsDir: pins, Progress: os.Stdout}
		for _, c := range comps {
			if err := b.Ensure(c); err != nil {
				return err
			}
		}
		if len(args) == 1 {
			dir, err := binaries.EnvtestAssets()
			if err != nil {
				return err
			}
			fmt.Println("envtest assets (KUBEBUILDER_ASSETS):", dir)
		}
		return nil
	case "path":
		if len(args) != 2 {
			return fmt.Errorf("usage: binaries path COMMAND")
		}
		p, err := binaries.Tool(args[1])
		if err != nil {
			return err
		}
		fmt.Println(p)
		return nil
	case "dir":
		if len(args) != 2 {
			return fmt.Errorf("usage: binaries dir COMPONENT")
		}
		c, ok := binaries.ByName(args[1])
		if !ok {
			return fmt.Errorf("unknown component %q (known: %s)", args[1], names())
		}
		d, err := c.Dir()
		if err != nil {
			return err
		}
		fmt.Println(d)
		return nil
	case "source":
		if len(args) != 3 {
			return fmt.Errorf("usage: binaries source COMPONENT DIR")
		}
		c, ok := binaries.ByName(args[1])
		if !ok {
			return fmt.Errorf("unknown component %q (known: %s)", args[1], names())
		}
		return (&binaries.Builder{PinsDir: pins, Progress: os.Stderr}).Source(c, args[2])
	case "envtest":
		dir, err := binaries.EnvtestAssets()
		if err != nil {
			return err
		}
		fmt.Println(dir)
		return nil
	}
	flag.Usage()
	return fmt.Errorf("unknown subcommand %q", args[0])
}

func names() string {
	var n []string
	for _, c := range binaries.All {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}
