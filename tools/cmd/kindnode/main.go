// Command kindnode builds the offline kind node image (tools/kindnode) into the Docker engine
// and prints its reference; `kindnode ref` prints the reference alone, without building.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cozystack/reserved-ips/tools/kindnode"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) == 2 && os.Args[1] == "ref" {
		fmt.Println(kindnode.Ref())
		return
	}
	if len(os.Args) != 2 || os.Args[1] != "build" {
		fmt.Fprintln(os.Stderr, "usage: kindnode build | ref")
		os.Exit(2)
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kindnode:", err)
		os.Exit(1)
	}
	ref, err := kindnode.Ensure(ctx, kindnode.Options{PinsDir: filepath.Join(wd, "tools", "binaries"), Progress: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kindnode:", err)
		os.Exit(1)
	}
	fmt.Println(ref)
}
