//go:build tools

// Package metallb pins the MetalLB commands the project builds from source: the controller
// (the local control plane's and the kind node image's) and the speaker (the kind node image's).
package metallb

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
