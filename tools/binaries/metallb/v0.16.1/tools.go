//go:build tools

// Package metallb pins the MetalLB controller the project builds from source.
package metallb

import _ "go.universe.tf/metallb/controller"
