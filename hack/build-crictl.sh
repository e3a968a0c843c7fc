#!/usr/bin/env bash
# Build crictl (kubernetes-sigs/cri-tools) from a checkout of its source, offline: its
# modules are vendored. v1.26.1 is the last release whose go.mod asks no newer Go than
# Debian 12's 1.19; later ones need Go 1.20+. Debian 12 packages no cri-tools, and these
# machines reach no Go module proxy, so the source comes from a checkout:
#
#   git clone --branch v1.26.1 https://github.com/kubernetes-sigs/cri-tools /tmp/cri-tools
#   hack/build-crictl.sh /tmp/cri-tools [/usr/local/bin/crictl]
#
# The CRI column of hack/engines.sh and tests/tests/engines_cri.rs use the crictl on PATH.
set -euo pipefail
src=${1:?usage: hack/build-crictl.sh CRI_TOOLS_CHECKOUT [OUTPUT]}
out=${2:-/usr/local/bin/crictl}
cd "$src"
GOFLAGS=-mod=vendor go build -trimpath -o "$out" ./cmd/crictl
"$out" --version
