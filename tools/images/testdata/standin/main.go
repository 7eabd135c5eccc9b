// Command standin is the image build's test command: a main package with no dependencies, so
// that TestBuildIsMultiArch compiles it for every platform in seconds.
package main

import (
	"fmt"
	"os"
)

// version is stamped by the image build (-X main.version), as in the controllers.
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(version)
		return
	}
	fmt.Println("standin", version)
}
