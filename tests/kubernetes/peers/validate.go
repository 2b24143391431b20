package main

import (
	"context"
	"encoding/json"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/registry/resource/deviceclass"
	"k8s.io/kubernetes/pkg/registry/resource/resourceslice"
)

// validateRequest holds API objects as a client sends them (resource.k8s.io JSON).  Each
// goes down the API server's create path: strict decoding (unknown or duplicate fields
// are errors, as with fieldValidation=Strict), defaulting, conversion to the internal
// version, then rest.BeforeCreate with the resource's registry strategy (dropping
// fields of disabled features, imperative and declarative validation).  A claim with a
// status is created without it, then its status is written as the scheduler writes an
// allocation (rest.BeforeUpdate with the status strategy).
type validateRequest struct {
	Objects []json.RawMessage `json:"objects"`
}

type validateResult struct {
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	Errors []string `json:"errors"`
	// DroppedByDefault: the release's default feature gates would silently drop some of the
	// object's fields (those of alpha features); Errors are with the shim's featureGates on.
	DroppedByDefault bool `json:"droppedByDefault"`
}

type prepared struct {
	result   validateResult
	object   runtime.Object // internal version
	status   bool           // a claim that carries a status
	defaults runtime.Object // after PrepareForCreate under the release's default gates
}

func validateVerb(in []byte) (any, error) {
	var req validateRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, legacyscheme.Scheme, legacyscheme.Scheme,
		kjson.SerializerOptions{Strict: true})
	items := make([]*prepared, 0, len(req.Objects))
	for _, raw := range req.Objects {
		items = append(items, prepare(strict, raw))
	}
	// Under the default gates first: the gates are process-wide, so they are switched once.
	for _, item := range items {
		if item.object != nil {
			item.defaults = afterPreparation(item.object)
		}
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(featureGates()); err != nil {
		return nil, err
	}
	out := make([]validateResult, 0, len(items))
	for _, item := range items {
		if item.object != nil {
			check(item)
		}
		out = append(out, item.result)
	}
	return map[string]any{"results": out, "gates": featureGates()}, nil
}

func prepare(strict runtime.Decoder, raw []byte) *prepared {
	item := &prepared{result: validateResult{Errors: []string{}}}
	obj, gvk, err := strict.Decode(raw, nil, nil)
	if gvk != nil {
		item.result.Kind = gvk.Kind
	}
	if obj == nil {
		item.result.Errors = append(item.result.Errors, fmt.Sprintf("decoding: %v", err))
		return item
	}
	if err != nil { // a strict-decoding error: the object decoded, with fields the API does not know
		item.result.Errors = append(item.result.Errors, fmt.Sprintf("strict decoding: %v", err))
	}
	if accessor, aerr := meta.Accessor(obj); aerr == nil {
		item.result.Name = accessor.GetName()
	}
	legacyscheme.Scheme.Default(obj)
	internal, err := legacyscheme.Scheme.ConvertToVersion(obj, resourceinternal.SchemeGroupVersion)
	if err != nil {
		item.result.Errors = append(item.result.Errors, fmt.Sprintf("converting: %v", err))
		return item
	}
	item.object = internal
	if claim, ok := internal.(*resourceinternal.ResourceClaim); ok {
		item.status = !apiequality.Semantic.DeepEqual(claim.Status, resourceinternal.ResourceClaimStatus{})
	}
	return item
}

func check(item *prepared) {
	created := item.object.DeepCopyObject()
	ctx := createContext(created, false)
	accessor, _ := meta.Accessor(created)
	rest.FillObjectMetaSystemFields(accessor)
	if err := rest.BeforeCreate(createStrategy(created), ctx, created); err != nil {
		item.result.Errors = append(item.result.Errors, err.Error())
	}
	item.result.DroppedByDefault = !apiequality.Semantic.DeepEqual(afterPreparation(item.object), item.defaults)
	if !item.status || len(item.result.Errors) > 0 {
		return
	}
	// The scheduler writes the allocation as an update of the status subresource.
	old := created.(*resourceinternal.ResourceClaim)
	old.ResourceVersion = "1"
	updated := old.DeepCopy()
	updated.Status = *item.object.(*resourceinternal.ResourceClaim).Status.DeepCopy()
	_, status := claimStrategies()
	if err := rest.BeforeUpdate(status, createContext(updated, true), updated, old); err != nil {
		item.result.Errors = append(item.result.Errors, "status: "+err.Error())
	}
}

// afterPreparation is the object as storage would keep it: created (the strategy's
// PrepareForCreate), then, for a claim with a status, that status written
// (PrepareForUpdate of the status strategy).  Fields of disabled features are gone.
func afterPreparation(obj runtime.Object) runtime.Object {
	created := obj.DeepCopyObject()
	createStrategy(created).PrepareForCreate(createContext(created, false), created)
	claim, ok := obj.(*resourceinternal.ResourceClaim)
	if !ok || apiequality.Semantic.DeepEqual(claim.Status, resourceinternal.ResourceClaimStatus{}) {
		return created
	}
	updated := created.DeepCopyObject().(*resourceinternal.ResourceClaim)
	updated.Status = *claim.Status.DeepCopy()
	_, status := claimStrategies()
	status.PrepareForUpdate(createContext(updated, true), updated, created)
	return updated
}

func createStrategy(obj runtime.Object) rest.RESTCreateStrategy {
	switch obj.(type) {
	case *resourceinternal.DeviceClass:
		return deviceclass.Strategy
	case *resourceinternal.ResourceSlice:
		return resourceslice.Strategy
	case *resourceinternal.ResourceClaim:
		create, _ := claimStrategies()
		return create
	}
	panic(fmt.Sprintf("no strategy for %T", obj))
}

// createContext is what the API server's handler puts in a request's context: the
// namespace and the request's resource.
func createContext(obj runtime.Object, status bool) context.Context {
	info := &genericapirequest.RequestInfo{IsResourceRequest: true, APIGroup: "resource.k8s.io", APIVersion: "v1", Verb: "create"}
	namespace := ""
	switch o := obj.(type) {
	case *resourceinternal.DeviceClass:
		info.Resource, info.Name = "deviceclasses", o.Name
	case *resourceinternal.ResourceSlice:
		info.Resource, info.Name = "resourceslices", o.Name
	case *resourceinternal.ResourceClaim:
		info.Resource, info.Name, namespace = "resourceclaims", o.Name, o.Namespace
	}
	if status {
		info.Verb, info.Subresource = "update", "status"
	}
	info.Namespace = namespace
	return genericapirequest.WithRequestInfo(genericapirequest.WithNamespace(context.Background(), namespace), info)
}
