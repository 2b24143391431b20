// Command hamipeer runs Kubernetes' own code on what hami-devices sends and emits, for the
// project's pytest suite (tests/kubernetes/peers/): one verb per call, JSON on stdin, JSON
// on stdout.
//
//	hamipeer quantity   resource.Quantity's parser on a list of raw JSON values
//	hamipeer extender   kube-scheduler's HTTPExtender client against a running extender
//	hamipeer validate   the API server's validation of DeviceClasses, ResourceSlices, ResourceClaims
//	hamipeer allocate   the official DRA allocator (k8s.io/dynamic-resource-allocation/structured)
//	hamipeer version    the Kubernetes release this binary was built against
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/klog/v2"
)

var verbs = map[string]func(in []byte) (any, error){
	"quantity": quantityVerb,
	"extender": extenderVerb,
	"validate": validateVerb,
	"allocate": allocateVerb,
	"version":  versionVerb,
}

func main() {
	if len(os.Args) != 2 || verbs[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: hamipeer quantity|extender|validate|allocate|version < request.json")
		os.Exit(2)
	}
	if level := os.Getenv("HAMIPEER_V"); level != "" { // Kubernetes' own logs on stderr, for debugging a test
		klog.InitFlags(nil)
		_ = flag.Set("v", level)
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	out, err := verbs[os.Args[1]](in)
	if err != nil {
		fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hamipeer:", err)
	os.Exit(1)
}

// decode reads the request body into v, refusing fields the verb does not know (a
// misspelt field in a test's request would otherwise be silently ignored).
func decode(in []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(in))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// errorText is nil for no error, else the error's message: what a JSON answer carries.
func errorText(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
