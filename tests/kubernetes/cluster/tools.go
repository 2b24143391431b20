//go:build tools

// The commands this module builds, so that `go mod tidy` keeps their dependencies.
package cluster

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
