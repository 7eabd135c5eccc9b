//go:build tools

// Package distribution pins the CNCF distribution registry the mirror tests run against.
package distribution

import _ "github.com/distribution/distribution/v3/cmd/registry"
