//go:build tools

// The command this module builds, so that `go mod tidy` keeps its dependencies.
package helm

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
