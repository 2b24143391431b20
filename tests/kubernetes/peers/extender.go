package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	configvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
)

// extenderRequest drives kube-scheduler's own extender client (pkg/scheduler/extender.go)
// against a running extender.  The extender entry comes from a KubeSchedulerConfiguration
// file, decoded, defaulted and validated as kube-scheduler does it; the test points its
// URL at the extender under test and may flip nodeCacheCapable.
type extenderRequest struct {
	Config           string     `json:"config"`
	URLPrefix        string     `json:"urlPrefix"`
	NodeCacheCapable *bool      `json:"nodeCacheCapable"`
	Nodes            []nodeSpec `json:"nodes"`
	Running          []podSpec  `json:"running"` // pods already on nodes (the candidates for preemption)
	Steps            []step     `json:"steps"`
}

type nodeSpec struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// podSpec is a pod as a test writes it; every quantity goes through resource.MustParse,
// as a Go client builds it, so what reaches the extender is the client's canonical form.
type podSpec struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	UID         string            `json:"uid"`
	Node        string            `json:"node"`
	Priority    *int32            `json:"priority"`
	Annotations map[string]string `json:"annotations"`
	Containers  []containerSpec   `json:"containers"`
}

type containerSpec struct {
	Limits   map[string]string `json:"limits"`
	Requests map[string]string `json:"requests"`
}

type step struct {
	Verb    string              `json:"verb"` // filter, prioritize, bind, preempt
	Pod     podSpec             `json:"pod"`
	Nodes   []string            `json:"nodes"`   // filter, prioritize: the candidates
	Node    string              `json:"node"`    // bind
	Victims map[string][]string `json:"victims"` // preempt: node -> UIDs of running pods kube-scheduler chose
}

type stepResult struct {
	Verb         string              `json:"verb"`
	Interested   bool                `json:"interested"` // managedResources: whether kube-scheduler calls us for this pod
	Error        *string             `json:"error"`
	Sent         map[string]string   `json:"sent,omitempty"` // the pod's first container's limits as the client serialised them
	Nodes        []string            `json:"nodes,omitempty"`
	Failed       map[string]string   `json:"failed,omitempty"`
	Unresolvable map[string]string   `json:"unresolvable,omitempty"`
	Scores       map[string]int64    `json:"scores,omitempty"`
	Weight       int64               `json:"weight,omitempty"`
	Victims      map[string][]string `json:"victims,omitempty"`
}

func extenderVerb(in []byte) (any, error) {
	var req extenderRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	cfg, err := loadExtenderConfig(req.Config)
	if err != nil {
		return nil, err
	}
	if req.URLPrefix != "" {
		cfg.URLPrefix = req.URLPrefix
	}
	if req.NodeCacheCapable != nil {
		cfg.NodeCacheCapable = *req.NodeCacheCapable
	}
	ext, err := scheduler.NewHTTPExtender(cfg)
	if err != nil {
		return nil, err
	}
	nodes := make([]*v1.Node, 0, len(req.Nodes))
	for _, n := range req.Nodes {
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}})
	}
	running := make([]*v1.Pod, 0, len(req.Running))
	for _, p := range req.Running {
		pod, err := buildPod(p)
		if err != nil {
			return nil, err
		}
		running = append(running, pod)
	}
	snapshot := cache.NewSnapshot(running, nodes)
	lister := snapshot.NodeInfos()
	results := make([]stepResult, 0, len(req.Steps))
	for i, s := range req.Steps {
		pod, err := buildPod(s.Pod)
		if err != nil {
			return nil, fmt.Errorf("steps[%d]: %w", i, err)
		}
		out := stepResult{Verb: s.Verb, Interested: ext.IsInterested(pod), Sent: sentLimits(pod)}
		candidates := make([]fwk.NodeInfo, 0, len(s.Nodes))
		for _, name := range s.Nodes {
			info, err := lister.Get(name)
			if err != nil {
				return nil, fmt.Errorf("steps[%d]: %w", i, err)
			}
			candidates = append(candidates, info)
		}
		switch s.Verb {
		case "filter":
			kept, failed, unresolvable, err := ext.Filter(pod, candidates)
			out.Error = errorText(err)
			out.Nodes = names(kept)
			out.Failed, out.Unresolvable = failed, unresolvable
		case "prioritize":
			scores, weight, err := ext.Prioritize(pod, candidates)
			out.Error = errorText(err)
			out.Weight = weight
			if scores != nil {
				out.Scores = map[string]int64{}
				for _, hp := range *scores {
					out.Scores[hp.Host] = hp.Score
				}
			}
		case "bind":
			binding := &v1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
				Target:     v1.ObjectReference{Kind: "Node", Name: s.Node},
			}
			out.Error = errorText(ext.Bind(binding))
		case "preempt":
			victims, err := victimsOf(s.Victims, running)
			if err != nil {
				return nil, fmt.Errorf("steps[%d]: %w", i, err)
			}
			chosen, err := ext.ProcessPreemption(pod, victims, lister)
			out.Error = errorText(err)
			out.Victims = map[string][]string{}
			for node, v := range chosen {
				uids := []string{}
				for _, p := range v.Pods {
					uids = append(uids, string(p.UID))
				}
				sort.Strings(uids)
				out.Victims[node] = uids
			}
		default:
			return nil, fmt.Errorf("steps[%d]: unknown verb %q", i, s.Verb)
		}
		results = append(results, out)
	}
	return map[string]any{
		"extender": map[string]any{
			"urlPrefix": cfg.URLPrefix, "nodeCacheCapable": cfg.NodeCacheCapable, "weight": cfg.Weight,
			"httpTimeout": cfg.HTTPTimeout.Duration.String(), "ignorable": cfg.Ignorable,
		},
		"steps": results,
	}, nil
}

// loadExtenderConfig decodes a KubeSchedulerConfiguration as kube-scheduler loads --config
// (its scheme: conversion and defaults), validates it, and returns its one extender.
func loadExtenderConfig(path string) (*schedulerapi.Extender, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	obj, gvk, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	cfg, ok := obj.(*schedulerapi.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("%s: a %v, not a KubeSchedulerConfiguration", path, gvk)
	}
	if err := configvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, fmt.Errorf("%s does not validate: %w", path, err)
	}
	if len(cfg.Extenders) != 1 {
		return nil, fmt.Errorf("%s: expected one extender, found %d", path, len(cfg.Extenders))
	}
	return &cfg.Extenders[0], nil
}

func buildPod(p podSpec) (*v1.Pod, error) {
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: types.UID(p.UID), Annotations: p.Annotations,
		},
		Spec: v1.PodSpec{NodeName: p.Node, Priority: p.Priority},
	}
	for i, c := range p.Containers {
		limits, err := resourceList(c.Limits)
		if err != nil {
			return nil, fmt.Errorf("pod %s container %d limits: %w", p.Name, i, err)
		}
		requests, err := resourceList(c.Requests)
		if err != nil {
			return nil, fmt.Errorf("pod %s container %d requests: %w", p.Name, i, err)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name:      fmt.Sprintf("c%d", i),
			Image:     "busybox",
			Resources: v1.ResourceRequirements{Limits: limits, Requests: requests},
		})
	}
	return pod, nil
}

// resourceList builds a ResourceList with resource.MustParse, as client code does; a value
// MustParse would panic on is reported as an error instead.
func resourceList(values map[string]string) (out v1.ResourceList, err error) {
	if len(values) == 0 {
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	out = v1.ResourceList{}
	for name, value := range values {
		out[v1.ResourceName(name)] = resource.MustParse(value)
	}
	return out, nil
}

// sentLimits is the first container's limits as the client puts them on the wire.
func sentLimits(pod *v1.Pod) map[string]string {
	if len(pod.Spec.Containers) == 0 {
		return nil
	}
	raw, err := json.Marshal(pod.Spec.Containers[0].Resources.Limits)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	_ = json.Unmarshal(raw, &out)
	return out
}

func names(infos []fwk.NodeInfo) []string {
	out := []string{}
	for _, n := range infos {
		out = append(out, n.Node().Name)
	}
	return out
}

func victimsOf(byNode map[string][]string, running []*v1.Pod) (map[string]*extenderv1.Victims, error) {
	byUID := map[string]*v1.Pod{}
	for _, p := range running {
		byUID[string(p.UID)] = p
	}
	out := map[string]*extenderv1.Victims{}
	for node, uids := range byNode {
		victims := &extenderv1.Victims{Pods: []*v1.Pod{}}
		for _, uid := range uids {
			p, ok := byUID[uid]
			if !ok {
				return nil, fmt.Errorf("victim %s is not a running pod", uid)
			}
			victims.Pods = append(victims.Pods, p)
		}
		out[node] = victims
	}
	return out, nil
}
