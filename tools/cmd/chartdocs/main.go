// Command chartdocs renders the READMEs of charts with helm-docs (pinned in
// tools/binaries/helm-docs), from each chart's README.md.gotmpl and the "# --" comments of its
// values.yaml: chartdocs charts/address-controller charts/metallb-iad.
package main

import (
	"fmt"
	"os"

	"github.com/cozystack/reserved-ips/tools/chartdocs"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: chartdocs CHART_DIR...")
		os.Exit(2)
	}
	for _, dir := range os.Args[1:] {
		if err := chartdocs.Update(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
