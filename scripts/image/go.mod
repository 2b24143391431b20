// ocilayout: the OCI image layout writer of scripts/build-image.sh, on go-containerregistry (built from the Go
// module proxy, cached under ~/.cache/hami-devices/go like the tests' Go peers).
module hami-devices.io/scripts/image

go 1.24.0

require github.com/google/go-containerregistry v0.20.6

require (
	github.com/containerd/stargz-snapshotter/estargz v0.16.3 // indirect
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/vbatts/tar-split v0.12.1 // indirect
	golang.org/x/sync v0.15.0 // indirect
)
