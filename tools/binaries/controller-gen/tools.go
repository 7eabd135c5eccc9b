//go:build tools

// Package controllergen pins controller-gen.
package controllergen

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
