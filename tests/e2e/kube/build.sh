#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and etcd from
# the versions pinned in a go.mod (tests/e2e/kube by default, or the directory
# given as $1, e.g. tests/e2e/kube/oldest), plus KWOK's controller and its
# default stages, into a cache outside the repository keyed by those versions,
# so a second run only checks that they are there. Prints the directory holding them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="$(cd "${1:-$here}" && pwd)"
kube_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$module/go.mod")"
# etcd comes from this directory's go.mod for every Kubernetes version: its v3
# API serves older API servers too, and one etcd build serves every version.
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$here/go.mod")"
kwok_version="$(cat "$here/kwok.version")"
cache_root="${CASTSLICE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/castslice}"
out="$cache_root/kube-$kube_version-etcd-$etcd_version-kwok-$kwok_version"
tools=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)

# One build at a time per cache entry: a second first run (`make e2e` in one shell,
# `python -m tests.e2e up` in another) waits here, then finds the entry complete.
# The lock is held until this script exits.
mkdir -p "$cache_root"
exec {lock}>"$out.lock"
flock "$lock"

complete=1
for t in "${tools[@]}"; do [[ -x "$out/$t" ]] || complete=0; done
if [[ $complete == 0 ]]; then
  mkdir -p "$out.tmp"
  cd "$module"
  minor="${kube_version#v1.}"; minor="${minor%%.*}"
  # What the release build stamps in (hack/lib/version.sh), so /version and
  # `kubectl version` report the pinned release; -s -w drops debug info.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
  done
  # -trimpath and no VCS stamping keep the build reproducible; the cache key is the version.
  export GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false" CGO_ENABLED=0
  for t in kube-apiserver kube-controller-manager kube-scheduler; do
    [[ -x "$out.tmp/$t" ]] || go build -ldflags "$ldflags" -o "$out.tmp/$t" "k8s.io/kubernetes/cmd/$t" >&2
  done
  # Named explicitly: go build would call it "server" (the import path's last
  # element before the /v3 major-version suffix).
  [[ -x "$out.tmp/etcd" ]] || (cd "$here" && go build -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3 >&2)
  # KWOK has its own module graph: installed by version, outside this go.mod.
  [[ -x "$out.tmp/kwok" ]] || (cd / && GOBIN="$out.tmp" GOFLAGS="-trimpath -buildvcs=false" \
    go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version" >&2)
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
# KWOK's default behaviour from the same release, as kwokctl sets it up (its
# kustomize/stage/fast): nodes turn Ready and renew their lease, bound Pods run,
# Job Pods complete, deleted Pods go. Taken from the module go install fetched.
stages="$out/kwok-stages.yaml"
if [[ ! -s "$stages" ]]; then
  src="$(cd / && GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$kwok_version" |
    awk -F'"' '$2 == "Dir" {print $4}')"
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    echo "---"
    cat "$src/kustomize/stage/$stage.yaml"
  done >"$stages.tmp"
  mv "$stages.tmp" "$stages"
fi
echo "$out"
