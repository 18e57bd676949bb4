#!/usr/bin/env bash
# Builds the helm CLI from its Go module (helm.sh/helm/v4, at the version in
# helm.version) into a cache outside the repository keyed by that version, and
# prints the path of the binary. A second run only checks that it is there.
# Two first builds at once take turns on a lock; the binary appears in its
# directory in one rename, so nobody ever runs a half-written helm.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(cat "$here/helm.version")"
cache_root="${CASTSLICE_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/castslice}"
out="$cache_root/helm-$version"

if [[ ! -x "$out/helm" ]]; then
  mkdir -p "$cache_root"
  exec 9>"$out.lock"
  flock 9
  if [[ ! -x "$out/helm" ]]; then
    work="$(mktemp -d "$out.tmp.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    # What helm's own release build stamps in (its Makefile), so `helm version`
    # names the release; -s -w drops debug info, -trimpath keeps it reproducible.
    ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version"
    ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
    # helm has its own module graph: installed by version, outside any go.mod.
    (cd / && GOBIN="$work" GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED=0 \
      go install -ldflags "$ldflags" "helm.sh/helm/v4/cmd/helm@$version" >&2)
    rm -rf "$out"
    mv "$work" "$out"
    trap - EXIT
  fi
fi
echo "$out/helm"
