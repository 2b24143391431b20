#!/usr/bin/env bash
# Build the hami-devices OCI image from this checkout, with no registry and no container daemon.
#
#   scripts/build-image.sh [OUT]          # OUT: the OCI image layout folder (default build/image/oci)
#   WHEEL=.whl/hami_devices-*.whl scripts/build-image.sh   # a wheel built already, instead of building one
#
# Two layers on an empty base:
#   1. base: Debian's python3.11 and the shared libraries it needs, unpacked from the distribution's own
#      packages (apt-get download + dpkg-deb -x; apt's package lists must be present: apt-get update);
#   2. app:  the project's wheel and its dependency wheels (the versions installed in $PYTHON's environment),
#      installed into /usr/local/lib/python3.11/dist-packages, and the example inventories under
#      /usr/share/hami-devices/examples.
# The layout is written by ocilayout (scripts/image, go-containerregistry from the Go module proxy, built and
# cached like the tests' Go peers).  The entrypoint is `python3.11 -m hami_devices.cli.main`, so
#   <image> discover --inventory /usr/share/hami-devices/examples/cluster.yaml
# runs a verb.  Reproducible: every file time is SOURCE_DATE_EPOCH (default: the last commit's time), tar
# entries are sorted with numeric owner 0, and no byte code is written, so the same checkout, packages and
# wheels give the same manifest digest, which is printed last and written to OUT/../digest.
# Downloads are cached in $HAMI_DEVICES_CACHE/image (default ~/.cache/hami-devices/image).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/build/image/oci}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CACHE="${HAMI_DEVICES_CACHE:-$HOME/.cache/hami-devices}/image"
REF="${IMAGE_REF:-hami-devices:$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("hami-devices"))')}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct)}"
export PYTHONDONTWRITEBYTECODE=1

# The dependency closure of python3.11 and of the C++ runtime (numpy's wheels link libstdc++), less what only
# package tooling needs (dpkg, tar and perl run maintainer scripts; mailcap and mime-support bring perl):
# nothing in the image installs packages.
ROOT_PACKAGES=(python3.11 libstdc++6)
EXCLUDE='^(dpkg|install-info|tar|perl|perl-base|perl-modules-.*|libperl.*|mailcap|mime-support|libgdbm-compat4|libacl1|libselinux1|libpcre2-8-0|libmd0|libzstd1)$'

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hami-image.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$CACHE/debs" "$CACHE/wheels" "$WORK/base" "$WORK/app" "$WORK/wheels"

step() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

step "base: the packages of ${ROOT_PACKAGES[*]}"
mapfile -t packages < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${ROOT_PACKAGES[@]}" | grep -v '^[ <]' | sort -u | grep -Ev "$EXCLUDE")
# one policy query for all: package -> candidate version (apt names a file's epoch "N%3a")
mapfile -t versions < <(apt-cache policy "${packages[@]}" | awk '/^[^ ]/ {sub(":$", "", $1); p=$1} /Candidate:/ {print p "=" $2}')
debs=() missing=()
for pinned in "${versions[@]}"; do
    package="${pinned%%=*}" version="${pinned#*=}"
    deb="$CACHE/debs/${package}_${version/:/%3a}_$(dpkg --print-architecture).deb"
    [[ -e "$deb" ]] || deb="$CACHE/debs/${package}_${version/:/%3a}_all.deb"
    [[ -e "$deb" ]] || missing+=("$pinned")
    debs+=("$package=$version")
done
if (( ${#missing[@]} )); then
    (cd "$CACHE/debs" && apt-get download -q=2 -o APT::Sandbox::User=root "${missing[@]}")
fi
for i in "${!debs[@]}"; do
    package="${debs[$i]%%=*}" version="${debs[$i]#*=}"
    found=("$CACHE/debs/${package}_${version/:/%3a}"_*.deb)
    debs[$i]="${found[0]}"
done
for deb in "${debs[@]}"; do
    dpkg-deb -x "$deb" "$WORK/base"
done
rm -rf "$WORK/base/usr/share/doc" "$WORK/base/usr/share/man" "$WORK/base/usr/share/info" "$WORK/base/usr/share/lintian"
mkdir -p "$WORK/base/tmp" "$WORK/base/root" "$WORK/base/etc"
chmod 1777 "$WORK/base/tmp"
printf 'root:x:0:0:root:/root:/usr/bin/python3.11\n' > "$WORK/base/etc/passwd"
printf 'root:x:0:\n' > "$WORK/base/etc/group"
printf '%s\n' "${debs[@]##*/}" > "$WORK/base/usr/share/hami-devices-base.packages"

step "app: the project's wheel and its dependencies"
if [[ -n "${WHEEL:-}" ]]; then  # a wheel built already from this checkout (scripts/test.sh: .whl/)
    cp "$WHEEL" "$WORK/wheels/"
else
    "$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/wheels" "$ROOT"
fi
"$PYTHON" - "$WORK/constraints.txt" <<'EOF'
import importlib.metadata as m
import sys

# the dependency versions this environment runs, so two builds from one environment install the same wheels
with open(sys.argv[1], "w") as out:
    for dist in sorted(m.distributions(), key=lambda d: d.metadata["Name"].lower()):
        if dist.metadata["Name"].lower() != "hami-devices":
            out.write(f"{dist.metadata['Name']}=={dist.version}\n")
EOF
wheel=("$WORK"/wheels/hami_devices-*.whl)
# this machine's Python and glibc are the image's (3.11; bookworm), so pip's choice of wheels holds there
"$PYTHON" -m pip download -q --only-binary=:all: -c "$WORK/constraints.txt" --find-links "$CACHE/wheels" \
    -d "$CACHE/wheels" "${wheel[0]}"
rm -f "$CACHE"/wheels/hami_devices-*.whl  # this checkout's wheel is built each time, never taken from the cache
"$PYTHON" -m pip install -q --no-index --find-links "$CACHE/wheels" --no-compile --no-warn-script-location \
    --target "$WORK/app/usr/local/lib/python3.11/dist-packages" "${wheel[0]}"
rm -rf "$WORK/app/usr/local/lib/python3.11/dist-packages/bin"  # scripts with this machine's interpreter
find "$WORK/app" -name '__pycache__' -prune -exec rm -rf {} +
# pip records the wheel's path in the build's temporary folder: a different one each build
for record in "$WORK"/app/usr/local/lib/python3.11/dist-packages/*.dist-info/direct_url.json; do
    [[ -e "$record" ]] || continue
    sed -i '/\/direct_url.json,/d' "$(dirname "$record")/RECORD"
    rm "$record"
done
mkdir -p "$WORK/app/usr/share/hami-devices"
git -C "$ROOT" archive HEAD examples | tar -x -C "$WORK/app/usr/share/hami-devices"

layer() {  # a tar of folder $1 as the image's root: sorted, owned by root, every time SOURCE_DATE_EPOCH
    tar --sort=name --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
        --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --owner=0 --group=0 --numeric-owner \
        -C "$1" -cf "$2" .
}
step "layers"
layer "$WORK/base" "$WORK/base.tar"
layer "$WORK/app" "$WORK/app.tar"

step "OCI layout"
tool="$("$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); from tests.kubernetes.gobuild import build; print(build(sys.argv[2], ".", "ocilayout"))' "$ROOT" "$ROOT/scripts/image")"
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
digest="$("$tool" -out "$OUT" -ref "$REF" -created "$SOURCE_DATE_EPOCH" \
    -entrypoint '["/usr/bin/python3.11", "-m", "hami_devices.cli.main"]' \
    -env PATH=/usr/local/bin:/usr/bin:/bin -env PYTHONDONTWRITEBYTECODE=1 -env HOME=/root -env LANG=C.UTF-8 \
    -workdir / -layer "$WORK/base.tar" -layer "$WORK/app.tar")"
printf '%s\n' "$digest" > "$(dirname "$OUT")/digest"
step "wrote $OUT ($REF)"
printf '%s\n' "$digest"
