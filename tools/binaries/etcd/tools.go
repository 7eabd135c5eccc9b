//go:build tools

// Package etcd pins the etcd server the project builds from source.
package etcd

import _ "go.etcd.io/etcd/server/v3"
