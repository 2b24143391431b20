package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// allocateRequest runs kube-scheduler's DRA allocator (objects defaulted as the API server
// stores them) (structured.NewAllocator, with the
// features its DRA plugin enables) over published slices and classes.  Steps are claims in
// order; each is judged on the state the earlier steps' allocations leave (allocations
// made by hami-devices, carried in the claims' status.allocation, as the scheduler
// gathers them from allocated claims).  Per step:
//   - feasibleNodes: the nodes where the official allocator allocates the claim now;
//   - pinned (for a claim hami-devices allocated): the official allocator on that node
//     with every device hami-devices did not choose made unavailable (dedicated devices
//     left out, shared ones filled to capacity): whether it finds an allocation, and
//     which.  Where it does, that allocation uses the same devices, so ours meets every
//     constraint the official allocator checks (selectors, classes, capacity request
//     policies, counters, matchAttribute ...).
type allocateRequest struct {
	Objects []json.RawMessage `json:"objects"` // ResourceSlices and DeviceClasses
	Nodes   []string          `json:"nodes"`
	Claims  []json.RawMessage `json:"claims"`
}

type allocateStep struct {
	Name          string                        `json:"name"`
	Error         *string                       `json:"error"`
	FeasibleNodes []string                      `json:"feasibleNodes"`
	Allocation    *resourceapi.AllocationResult `json:"allocation"` // on the first feasible node
	Pinned        *pinnedResult                 `json:"pinned"`
}

type pinnedResult struct {
	Node       string                        `json:"node"`
	Error      *string                       `json:"error"`
	Allocation *resourceapi.AllocationResult `json:"allocation"`
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
}

func allocateVerb(in []byte) (any, error) {
	var req allocateRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	var slices []*resourceapi.ResourceSlice
	classes := classLister{}
	for i, raw := range req.Objects {
		var head metav1.TypeMeta
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("objects[%d]: %w", i, err)
		}
		switch head.Kind {
		case "ResourceSlice":
			s := &resourceapi.ResourceSlice{}
			if err := json.Unmarshal(raw, s); err != nil {
				return nil, fmt.Errorf("objects[%d]: %w", i, err)
			}
			legacyscheme.Scheme.Default(s)
			slices = append(slices, s)
		case "DeviceClass":
			c := &resourceapi.DeviceClass{}
			if err := json.Unmarshal(raw, c); err != nil {
				return nil, fmt.Errorf("objects[%d]: %w", i, err)
			}
			legacyscheme.Scheme.Default(c)
			classes[c.Name] = c
		default:
			return nil, fmt.Errorf("objects[%d]: unexpected kind %q", i, head.Kind)
		}
	}
	ctx := context.Background()
	celCache := cel.NewCache(1000, celFeatures())
	state := emptyState()
	shared := sets.New[structured.DeviceID]() // devices with a share allocated
	steps := make([]allocateStep, 0, len(req.Claims))
	for i, raw := range req.Claims {
		claim := &resourceapi.ResourceClaim{}
		if err := json.Unmarshal(raw, claim); err != nil {
			return nil, fmt.Errorf("claims[%d]: %w", i, err)
		}
		legacyscheme.Scheme.Default(claim) // as the API server stored it (count 1, ExactCount ...)
		ours := claim.Status.Allocation
		fresh := claim.DeepCopy()
		fresh.Status = resourceapi.ResourceClaimStatus{}
		step := allocateStep{Name: claim.Name, FeasibleNodes: []string{}}
		for _, node := range req.Nodes {
			result, err := allocateOn(ctx, state, classes, slices, celCache, node, fresh)
			if err != nil {
				step.Error = errorText(err)
				break
			}
			if result != nil {
				step.FeasibleNodes = append(step.FeasibleNodes, node)
				if step.Allocation == nil {
					step.Allocation = result
				}
			}
		}
		if ours != nil {
			step.Pinned = pinned(ctx, state, shared, classes, slices, celCache, fresh, ours)
			addAllocation(state, shared, ours)
		}
		steps = append(steps, step)
	}
	return map[string]any{"steps": steps}, nil
}

func emptyState() *structured.AllocatedState {
	return &structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

func cloneState(s *structured.AllocatedState) *structured.AllocatedState {
	return &structured.AllocatedState{
		AllocatedDevices:         s.AllocatedDevices.Clone(),
		AllocatedSharedDeviceIDs: s.AllocatedSharedDeviceIDs.Clone(),
		AggregatedCapacity:       s.AggregatedCapacity.Clone(),
	}
}

// addAllocation books an allocation as kube-scheduler's claim tracker does
// (foreachAllocatedDevice with consumable capacity on).
func addAllocation(s *structured.AllocatedState, shared sets.Set[structured.DeviceID], a *resourceapi.AllocationResult) {
	for _, r := range a.Devices.Results {
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil {
			shared.Insert(id)
			s.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				s.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
			continue
		}
		s.AllocatedDevices.Insert(id)
	}
}

// allocateOn runs the allocator for one node.  A panic of the allocator (1.34's capacity check
// indexes the slice with the request's device index, kubernetes#133705, and runs off a short
// slice) is returned as an error starting with "panic:", so the step records it: in
// kube-scheduler it would end the process.
func allocateOn(ctx context.Context, state *structured.AllocatedState, classes classLister,
	slices []*resourceapi.ResourceSlice, celCache *cel.Cache, node string, claim *resourceapi.ResourceClaim,
) (result *resourceapi.AllocationResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			result, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	allocator, err := structured.NewAllocator(ctx, draFeatures(), *cloneState(state), classes, slices, celCache)
	if err != nil {
		return nil, err
	}
	results, err := allocator.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, []*resourceapi.ResourceClaim{claim})
	if err != nil || len(results) == 0 {
		return nil, err
	}
	return &results[0], nil
}

// pinned runs the official allocator where only the devices of “ours“ are free.
func pinned(ctx context.Context, state *structured.AllocatedState, shared sets.Set[structured.DeviceID],
	classes classLister,
	slices []*resourceapi.ResourceSlice, celCache *cel.Cache, claim *resourceapi.ResourceClaim,
	ours *resourceapi.AllocationResult,
) *pinnedResult {
	chosen := sets.New[structured.DeviceID]()
	for _, r := range ours.Devices.Results {
		chosen.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
	}
	out := &pinnedResult{Node: allocationNode(ours)}
	narrowed := cloneState(state)
	kept := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, s := range slices {
		copied := s.DeepCopy()
		copied.Spec.Devices = nil
		for _, d := range s.Spec.Devices {
			id := structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)
			switch {
			case chosen.Has(id), narrowed.AllocatedDevices.Has(id):
				// chosen, or already allocated (it still consumes its counters)
			case shared.Has(id):
				full := map[resourceapi.QualifiedName]resource.Quantity{}
				for name, c := range d.Capacity {
					full[name] = c.Value
				}
				narrowed.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, full))
			default:
				continue // a free device we did not choose: left out
			}
			copied.Spec.Devices = append(copied.Spec.Devices, d)
		}
		if s.Spec.Devices == nil {
			copied.Spec.Devices = nil
		}
		kept = append(kept, copied)
	}
	result, err := allocateOn(ctx, narrowed, classes, kept, celCache, out.Node, claim)
	out.Error = errorText(err)
	out.Allocation = result
	return out
}

// allocationNode is the node an allocation's node selector names (metadata.name In [node]).
func allocationNode(a *resourceapi.AllocationResult) string {
	if a.NodeSelector == nil {
		return ""
	}
	names := []string{}
	for _, term := range a.NodeSelector.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" {
				names = append(names, f.Values...)
			}
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
