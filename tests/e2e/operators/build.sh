#!/usr/bin/env bash
# Builds the operator named $1 (a name in ./versions) from its Go module into a
# cache outside the repository keyed by its version, with the CRDs and sample
# manifests of the same module version beside it, so a second run only checks
# that they are there. Prints the directory holding them:
#   operator       the controller binary
#   crds/*.yaml    the module's CustomResourceDefinitions
#   samples/*.yaml the module's sample manifests the tests apply
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name="${1:?usage: build.sh NAME (one of the names in $here/versions)}"
read -r _ module version package crds samples < <(awk -v n="$name" '$1 == n' "$here/versions") ||
  { echo "build.sh: no operator named $name in $here/versions" >&2; exit 2; }
cache_root="${CASTSLICE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/castslice}"
out="$cache_root/operator-$name-$version"
mkdir -p "$cache_root"
# Two first runs at once (two test sessions) wait for each other instead of
# building into the same temporary directory.
exec 9>"$out.lock"
flock 9
if [[ ! -x "$out/operator" ]]; then
  rm -rf "$out.tmp" && mkdir -p "$out.tmp/crds" "$out.tmp/samples"
  src="$(cd / && GOFLAGS= go mod download -json "$module@$version" | awk -F'"' '$2 == "Dir" {print $4}')"
  # The module's own go.mod decides every dependency, as `go install pkg@version` does.
  target="$module"; [[ $package == . ]] || target="$module/${package#./}"
  (cd / && GOBIN="$out.tmp/bin" GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED=0 \
    go install -ldflags "-s -w" "$target@$version" >&2)
  mv "$out.tmp/bin/"* "$out.tmp/operator" && rmdir "$out.tmp/bin"
  cp "$src/$crds/"*.yaml "$out.tmp/crds/"
  rm -f "$out.tmp/crds/kustomization.yaml"
  for sample in $samples; do cp "$src/$sample" "$out.tmp/samples/"; done
  chmod -R u+w "$out.tmp"
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
echo "$out"
