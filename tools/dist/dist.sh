#!/usr/bin/env bash
# dist.sh VERSION OUTDIR PLATFORM... : Steward's release archives.
#
# For each PLATFORM (os/arch) it builds steward, steward-gpu,
# steward-exec and the example trainer (jobs/trainer: what the demo and
# jobs/trainer.nomad.hcl run), and packs them with LICENSE, NOTICE, README.md, VERSION,
# CHANGELOG.md, example.hcl, acl/ and jobs/ into
# OUTDIR/steward_VERSION_OS_ARCH.tar.gz; then writes OUTDIR/SHA256SUMS, signs
# it (OUTDIR/SHA256SUMS.sig, a detached gpg signature), exports the public
# key next to it (steward-release-key.gpg for gpgv, .asc for gpg --import)
# and copies install-plugins.sh there. The archives are reproducible: fixed
# owner, mode and modification time (the commit's), sorted entries.
#
# Signing is sign.sh's: DIST_GPG_KEY names the release key in the
# maintainer's own keyring; without it a throwaway key signs, and it says so.
#
# cgo: the NVML backends (go-nvml dlopens libnvidia-ml.so.1 through C) need
# it. The host's own platform builds with the host's C compiler; another
# platform with $CC_<os>_<arch> (default <gnu triplet>-gcc, e.g.
# aarch64-linux-gnu-gcc from Debian's gcc-aarch64-linux-gnu) when it is
# installed, and otherwise without cgo: its plugins then cannot see real
# GPUs and say so (steward-gpu -version; the plugin's log), and this script
# says so too. DIST_REQUIRE_CGO=1 makes that an error instead. Here
# (Debian, no cross compiler installed) linux/arm64 builds without cgo.
set -euo pipefail

version=$1 out=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
GO=${GO:-go}
# -trimpath keeps this machine's paths out of the binaries; it also builds
# every package anew (the build cache keys on it): about 10 minutes per
# platform on 2 cores when cold. The test (dist_test.go) passes
# DIST_BUILD_FLAGS= to reuse what `make build plugins` compiled.
read -r -a buildflags <<<"${DIST_BUILD_FLAGS--trimpath}"
ldflags="-s -w -X github.com/gpu-steward/steward/internal/version.Version=$version"
mtime=$(git log -1 --format=%cI 2>/dev/null || echo 2026-01-01T00:00:00Z)
host=$($GO env GOOS)/$($GO env GOARCH)
files=(LICENSE NOTICE README.md VERSION CHANGELOG.md example.hcl)
dirs=(acl jobs)

mkdir -p "$out"
made=()
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for tool in gpg gpgv sha256sum; do
  command -v $tool >/dev/null || { echo "dist: $tool is needed to sum and sign (Debian: apt-get install gnupg gpgv; make gpg)" >&2; exit 1; }
done

for platform in "$@"; do
  os=${platform%/*} arch=${platform#*/}
  name=steward_${version}_${os}_${arch}
  stage=$work/$name
  mkdir -p "$stage"
  cgo=1 cc=
  if [ "$platform" != "$host" ]; then
    case $arch in
      amd64) triplet=x86_64-linux-gnu ;;
      arm64) triplet=aarch64-linux-gnu ;;
      *) triplet=$arch-linux-gnu ;;
    esac
    var=CC_${os}_${arch}
    cc=${!var:-$triplet-gcc}
    if ! command -v "$cc" >/dev/null; then
      if [ "${DIST_REQUIRE_CGO:-0}" = 1 ]; then
        echo "dist: no C compiler $cc for $platform (apt-get install gcc-$triplet, or set $var)" >&2
        exit 1
      fi
      echo "dist: WARNING: no C compiler $cc for $platform: building it without cgo, so its plugins have no NVML (they report no real GPUs; simulated ones work). Install gcc-$triplet for a full build." >&2
      cgo=0 cc=
    fi
  fi
  echo "==> $name (cgo=$cgo${cc:+, CC=$cc})"
  for pkg in . ./cmd/steward-gpu ./cmd/steward-exec ./jobs/trainer; do
    bin=steward
    [ "$pkg" = . ] || bin=$(basename "$pkg")
    GOOS=$os GOARCH=$arch CGO_ENABLED=$cgo ${cc:+CC=$cc} \
      $GO build ${buildflags[@]+"${buildflags[@]}"} -ldflags "$ldflags" -o "$stage/$bin" "$pkg"
  done
  cp "${files[@]}" "$stage/"
  for d in "${dirs[@]}"; do
    # What git tracks, so that local leftovers (checkpoints, built
    # trainers) stay out; a tree without git ships the directory as is.
    if git ls-files --error-unmatch "$d" >/dev/null 2>&1; then
      git ls-files -z "$d" | while IFS= read -r -d '' f; do
        mkdir -p "$stage/$(dirname "$f")" && cp "$f" "$stage/$f"
      done
    else
      cp -r "$d" "$stage/"
    fi
  done
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
    --mode='u+rw,go+r,go-w' -C "$work" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
  made+=("$name.tar.gz")
done

cp tools/dist/install-plugins.sh "$out/"
chmod 0755 "$out/install-plugins.sh"
cd "$out"
sha256sum "${made[@]}" install-plugins.sh >SHA256SUMS
echo "==> $out/SHA256SUMS"
cat SHA256SUMS

"$root/tools/dist/sign.sh" .
