#!/bin/sh
# Longer fault injection: the kill -9 tests of tests/tests/faults.rs with N iterations per
# runner (default 200). Usage: hack/faults.sh [N]
set -eu
cd "$(dirname "$0")/.."
cargo build --workspace --bins
CAPSULE_FAULT_ITERS="${1:-200}" cargo test -p capsule-e2e --test faults -- --test-threads=1
