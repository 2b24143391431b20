//go:build !k8slatest

package main

// What differs between the pinned release (1.34) and the newest one: see shim_latest.go.

import (
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/registry/resource/resourceclaim"
)

// featureGates: consumable capacity (shared devices) and partitionable devices are alpha
// in 1.34, so a cluster serving our slices runs with them on.
func featureGates() map[string]bool {
	return map[string]bool{"DRAConsumableCapacity": true, "DRAPartitionableDevices": true}
}

func claimStrategies() (rest.RESTCreateStrategy, rest.RESTUpdateStrategy) {
	create := resourceclaim.NewStrategy(nil)
	return create, resourceclaim.NewStatusStrategy(create)
}

// draFeatures is what kube-scheduler's DRA plugin passes the allocator with those gates on.
func draFeatures() structured.Features {
	return structured.Features{
		AdminAccess: true, ConsumableCapacity: true, PartitionableDevices: true, PrioritizedList: true,
		DeviceTaints: false, DeviceBinding: false, DeviceStatus: false,
	}
}

func celFeatures() cel.Features {
	return cel.Features{EnableConsumableCapacity: true}
}
