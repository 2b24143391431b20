// kubeletdriver plays the kubelet towards a DRA kubelet plugin, with the kubelet's own code:
// pluginmanager watches the plugins_registry directory and registers what it finds (GetInfo, the DRA
// handler's validation, NotifyRegistrationStatus), and the DRA plugin manager's client calls
// NodePrepareResources / NodeUnprepareResources as the kubelet's DRA manager does.
//
// It reads one JSON command per line on stdin and answers one JSON line on stdout:
//
//	{"op": "wait_registered", "timeout_s": 30}
//	{"op": "registrations"}                       -> how often the driver was registered / deregistered
//	{"op": "prepare", "claims": [{"namespace": ..., "name": ..., "uid": ...}], "retry_s": 0}
//	{"op": "unprepare", "claims": [...], "retry_s": 0}
//	{"op": "concurrent", "calls": [{"op": "prepare", ...}, ...]}  -> the answers, in the calls' order
//	{"op": "cdi", "dir": "/var/run/cdi", "ids": ["vendor/class=name", ...]}
//	    -> the container runtimes' CDI library (tags.cncf.io/container-device-interface, as containerd and
//	       CRI-O use it) loads the directory: its errors per spec file, and each id resolved to its edits
//
// retry_s > 0 repeats a call that fails as a whole (no plugin, no connection) until it answers, as the
// kubelet's pod workers retry; "attempts" says how many calls it took.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	cdi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// countingHandler is the DRA plugin manager as the kubelet adds it to its plugin manager, counting the
// registrations it accepts.
type countingHandler struct {
	*plugin.DRAPluginManager
	mu           sync.Mutex
	registered   int
	deregistered int
	lastError    string
}

func (h *countingHandler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.DRAPluginManager.RegisterPlugin(name, endpoint, versions, timeout)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.registered++
	} else {
		h.lastError = err.Error()
	}
	return err
}

func (h *countingHandler) DeRegisterPlugin(name, endpoint string) {
	h.DRAPluginManager.DeRegisterPlugin(name, endpoint)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deregistered++
}

var _ cache.PluginHandler = &countingHandler{}

type claimRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

type command struct {
	Op       string     `json:"op"`
	Claims   []claimRef `json:"claims"`
	RetryS   float64    `json:"retry_s"`
	TimeoutS float64    `json:"timeout_s"`
	Calls    []command  `json:"calls"`
	Dir      string     `json:"dir"`
	IDs      []string   `json:"ids"`
}

type driver struct {
	name    string
	handler *countingHandler
}

func (d *driver) claims(refs []claimRef) []*drapb.Claim {
	out := make([]*drapb.Claim, 0, len(refs))
	for _, r := range refs {
		out = append(out, &drapb.Claim{Namespace: r.Namespace, Name: r.Name, UID: r.UID})
	}
	return out
}

// call runs one prepare or unprepare through the registered plugin, retrying while it fails as a whole.
func (d *driver) call(ctx context.Context, c command) map[string]any {
	deadline := time.Now().Add(time.Duration(c.RetryS * float64(time.Second)))
	attempts := 0
	for {
		attempts++
		response, err := d.once(ctx, c)
		if err == nil || time.Now().After(deadline) {
			answer := map[string]any{"op": c.Op, "attempts": attempts, "response": response}
			if err != nil {
				answer["error"] = err.Error()
			}
			return answer
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *driver) once(ctx context.Context, c command) (any, error) {
	p, err := d.handler.GetPlugin(d.name)
	if err != nil {
		return nil, err
	}
	switch c.Op {
	case "prepare":
		return p.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: d.claims(c.Claims)})
	case "unprepare":
		return p.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: d.claims(c.Claims)})
	}
	return nil, fmt.Errorf("unknown op %q", c.Op)
}

func (d *driver) run(ctx context.Context, c command) any {
	switch c.Op {
	case "prepare", "unprepare":
		return d.call(ctx, c)
	case "concurrent":
		answers := make([]any, len(c.Calls))
		var wg sync.WaitGroup
		for i, sub := range c.Calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = d.run(ctx, sub)
			}()
		}
		wg.Wait()
		return map[string]any{"op": c.Op, "answers": answers}
	case "wait_registered":
		deadline := time.Now().Add(time.Duration(c.TimeoutS * float64(time.Second)))
		for {
			if _, err := d.handler.GetPlugin(d.name); err == nil {
				return d.registrations()
			} else if time.Now().After(deadline) {
				answer := d.registrations()
				answer["error"] = err.Error()
				return answer
			}
			time.Sleep(100 * time.Millisecond)
		}
	case "registrations":
		return d.registrations()
	case "cdi":
		return loadCDI(c.Dir, c.IDs)
	}
	return map[string]any{"op": c.Op, "error": "unknown op"}
}

func (d *driver) registrations() map[string]any {
	d.handler.mu.Lock()
	defer d.handler.mu.Unlock()
	return map[string]any{"op": "registrations", "registered": d.handler.registered,
		"deregistered": d.handler.deregistered, "last_error": d.handler.lastError}
}

func main() {
	registry := flag.String("registry", "", "the plugins_registry directory to watch")
	driverName := flag.String("driver", "hami-devices.io", "the DRA driver name")
	klog.InitFlags(nil)
	flag.Parse()
	if *registry == "" {
		fmt.Fprintln(os.Stderr, "--registry is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// No API client: the kubelet uses it only to wipe the node's ResourceSlices when a plugin stays away.
	noNode := func() (*v1.Node, error) { return nil, errors.New("no node object in this test") }
	manager := plugin.NewDRAPluginManager(ctx, nil, noNode, nil, time.Hour)
	handler := &countingHandler{DRAPluginManager: manager}
	plugins := pluginmanager.NewPluginManager(*registry, &record.FakeRecorder{})
	plugins.AddHandler(registerapi.DRAPlugin, handler)
	stop := make(chan struct{})
	go plugins.Run(config.NewSourcesReady(func(sets.Set[string]) bool { return true }), stop)

	d := &driver{name: *driverName, handler: handler}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = out.Encode(map[string]any{"error": err.Error()})
			continue
		}
		if err := out.Encode(d.run(ctx, c)); err != nil {
			break
		}
	}
	close(stop)
	manager.Stop()
}

// loadCDI reads a CDI spec directory as a container runtime does before it starts a container, and
// resolves the device ids the kubelet would hand the runtime.
func loadCDI(dir string, ids []string) map[string]any {
	registry, _ := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	answer := map[string]any{"op": "cdi"}
	if err := registry.Refresh(); err != nil {
		answer["refresh_error"] = err.Error()
	}
	specErrors := map[string][]string{}
	for path, errs := range registry.GetErrors() {
		for _, err := range errs {
			specErrors[path] = append(specErrors[path], err.Error())
		}
	}
	answer["errors"] = specErrors
	devices := map[string]any{}
	for _, id := range ids {
		device := registry.GetDevice(id)
		if device == nil {
			devices[id] = nil
			continue
		}
		nodes := []string{}
		for _, n := range device.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		mounts := []string{}
		for _, m := range device.ContainerEdits.Mounts {
			mounts = append(mounts, m.HostPath+":"+m.ContainerPath)
		}
		devices[id] = map[string]any{"env": device.ContainerEdits.Env, "device_nodes": nodes, "mounts": mounts}
	}
	answer["devices"] = devices
	return answer
}
