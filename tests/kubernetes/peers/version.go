package main

import "runtime/debug"

// versionVerb names the k8s.io modules this binary was linked with, from its build info.
func versionVerb([]byte) (any, error) {
	mods := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			version := m.Version
			if m.Replace != nil {
				version = m.Replace.Version
			}
			mods[m.Path] = version
		}
	}
	return map[string]any{"modules": mods}, nil
}
