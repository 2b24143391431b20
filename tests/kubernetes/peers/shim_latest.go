//go:build k8slatest

package main

// The newest release (built with -modfile=go.latest.mod -tags k8slatest): see shim_pinned.go.

import (
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/registry/resource/resourceclaim"
)

// featureGates: consumable capacity and partitionable devices are beta (on) here.  The
// claim status's per-field authorization needs an authenticated request, which these
// checks of validation do not make, so it is off.
func featureGates() map[string]bool {
	return map[string]bool{"DRAResourceClaimGranularStatusAuthorization": false}
}

func claimStrategies() (rest.RESTCreateStrategy, rest.RESTUpdateStrategy) {
	create := resourceclaim.NewStrategy(nil, nil)
	return create, resourceclaim.NewStatusStrategy(create)
}

func draFeatures() structured.Features {
	return structured.Features{
		AdminAccess: true, ConsumableCapacity: true, PartitionableDevices: true, PrioritizedList: true,
	}
}

func celFeatures() cel.Features {
	return cel.Features{EnableConsumableCapacity: true}
}
