//go:build tools

// Package golangcilint pins golangci-lint, which `make lint` runs over every module.
package golangcilint

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
