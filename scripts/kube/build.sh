#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kube-scheduler of this
# folder's module (Kubernetes v1.37.2) and prints the folder that holds them.
# A build is kept, under STOCKGUARD_KUBE_CACHE (default: the user's cache), for
# as long as go.mod, go.sum and the Go version are the same: CI builds once per
# machine (15-20 minutes on 2 cores: some 1,450 CPU-seconds), then finds it
# (under a second).
set -euo pipefail
cd "$(dirname "$0")"
log() { printf '%s scripts/kube: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

export GOWORK=off GOFLAGS=-mod=readonly
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
stamp=$( (cat go.mod go.sum; go env GOVERSION) | sha256sum | cut -c1-12)
cache=${STOCKGUARD_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stockguard-kube}
dir=$cache/$version-$stamp
bins=(kube-apiserver kube-controller-manager kube-scheduler)

have=1
for b in "${bins[@]}"; do [ -x "$dir/$b" ] || have=""; done
if [ -n "$have" ]; then
  log "found Kubernetes $version (built before)"
  echo "$dir"
  exit 0
fi

log "building ${bins[*]} $version (once per go.mod, go.sum and Go version)"
start=$(date +%s)
tmp=$(mktemp -d "$cache.XXXXXX" 2>/dev/null || { mkdir -p "$cache" && mktemp -d "$cache.XXXXXX"; })
trap 'rm -rf "$tmp"' EXIT
# The version the servers report (/version, and their compatibility version).
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
pkgs=()
for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
mkdir -p "$cache"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
log "built in $(( $(date +%s) - start ))s"
echo "$dir"
