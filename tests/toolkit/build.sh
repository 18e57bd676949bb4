#!/usr/bin/env bash
# Builds nvidia-cdi-hook from nvidia-container-toolkit's Go module (at the version in
# nvidia-container-toolkit.version, the first releases with the apply-cuda-memory-limits
# hook being v1.20.1 and later) into a cache outside the repository keyed by that version,
# and prints the path of the binary. A second run only checks that it is there. Two first
# builds at once take turns on a lock; the binary appears in its directory in one rename.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(cat "$here/nvidia-container-toolkit.version")"
cache_root="${CASTSLICE_TOOLKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/castslice}"
out="$cache_root/nvidia-cdi-hook-$version"

if [[ ! -x "$out/nvidia-cdi-hook" ]]; then
  mkdir -p "$cache_root"
  exec 9>"$out.lock"
  flock 9
  if [[ ! -x "$out/nvidia-cdi-hook" ]]; then
    work="$(mktemp -d "$out.tmp.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    # go-nvml binds libnvidia-ml.so.1 through cgo and dlopen: the hook needs cgo, and no
    # NVIDIA library at build time. The toolkit has its own module graph: installed by
    # version, outside any go.mod.
    # cgo prints go-nvml's deprecation warnings by the hundred: shown only when it fails.
    if ! (cd / && GOBIN="$work/bin" GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED=1 \
      go install "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$version") \
      >"$work/build.log" 2>&1; then
      cat "$work/build.log" >&2
      exit 1
    fi
    rm -rf "$out"
    mv "$work/bin" "$out"
    rm -rf "$work"
    trap - EXIT
  fi
fi
echo "$out/nvidia-cdi-hook"
