// ocilayout writes an OCI image layout from layer tarballs, with go-containerregistry: the layers in the order
// given on an empty base, a config with the entrypoint, environment and working folder, and every timestamp at
// -created (SOURCE_DATE_EPOCH), so the same layers give the same digest.  It prints the manifest digest.
//
//	ocilayout -out DIR -ref hami-devices:0.1.0 -created 1700000000 -entrypoint '["python3"]' \
//	    -env PATH=/usr/bin -workdir / -layer base.tar -layer app.tar
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var layers, env list
	out := flag.String("out", "", "the OCI layout folder to write (must not exist)")
	ref := flag.String("ref", "", "the image's name in the layout's index (org.opencontainers.image.ref.name)")
	created := flag.Int64("created", 0, "seconds since the epoch for every timestamp (SOURCE_DATE_EPOCH)")
	entrypoint := flag.String("entrypoint", "[]", "the entrypoint, a JSON list")
	workdir := flag.String("workdir", "/", "the working folder")
	flag.Var(&layers, "layer", "an uncompressed layer tarball (repeatable, bottom first)")
	flag.Var(&env, "env", "KEY=VALUE of the image's environment (repeatable)")
	flag.Parse()
	if err := run(*out, *ref, *created, *entrypoint, *workdir, layers, env); err != nil {
		fmt.Fprintln(os.Stderr, "ocilayout:", err)
		os.Exit(1)
	}
}

func run(out, ref string, created int64, entrypoint, workdir string, layers, env []string) error {
	if out == "" || ref == "" || len(layers) == 0 {
		return fmt.Errorf("-out, -ref and at least one -layer are required")
	}
	var entry []string
	if err := json.Unmarshal([]byte(entrypoint), &entry); err != nil {
		return fmt.Errorf("-entrypoint: %w", err)
	}
	when := v1.Time{Time: time.Unix(created, 0).UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, path := range layers {
		layer, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("layer %s: %w", path, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: when, CreatedBy: "scripts/build-image.sh: " + path[strings.LastIndex(path, "/")+1:]},
		})
		if err != nil {
			return err
		}
	}
	config, err := img.ConfigFile()
	if err != nil {
		return err
	}
	config = config.DeepCopy()
	config.Created = when
	config.Architecture = "amd64"
	config.OS = "linux"
	config.Config.Entrypoint = entry
	config.Config.Env = env
	config.Config.WorkingDir = workdir
	img, err = mutate.ConfigFile(img, config)
	if err != nil {
		return err
	}
	img, err = mutate.CreatedAt(img, when)
	if err != nil {
		return err
	}
	path, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := path.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(digest.String())
	return nil
}
