#!/usr/bin/env bash
# Kitsoki's agent runtime package with capsule's backend: assembles Kitsoki's files
# (unchanged, from $KITSOKI_AGENTRUNTIME, default ../shared/kitsoki-agentruntime) and
# integrations/kitsoki/*.go in a temporary Go module and runs `go test` on it against the
# capsule binary $CAPSULE_BIN (default target/debug/capsule). Extra arguments go to
# `go test` (e.g. -run TestCapsule).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
src="${KITSOKI_AGENTRUNTIME:-$repo/../shared/kitsoki-agentruntime}"
export CAPSULE_BIN="${CAPSULE_BIN:-$repo/target/debug/capsule}"
command -v go >/dev/null || { echo "test-kitsoki: go not found (Debian: apt-get install golang-go)" >&2; exit 2; }
[ -f "$src/types.go" ] || { echo "test-kitsoki: Kitsoki's package not found at $src (set KITSOKI_AGENTRUNTIME)" >&2; exit 2; }
[ -x "$CAPSULE_BIN" ] || { echo "test-kitsoki: no capsule binary at $CAPSULE_BIN (cargo build --workspace --bins)" >&2; exit 2; }
scratch_base=/dev/shm
[ -w "$scratch_base" ] || scratch_base="${TMPDIR:-/tmp}"
work="$(mktemp -d "$scratch_base/kitsoki-go.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
mod="$work/agentruntime"
mkdir -p "$mod" "$work/tmp"
cp "$src"/*.go "$mod/"
cp "$repo"/integrations/kitsoki/*.go "$mod/"
printf 'module kitsoki.local/agentruntime\n\ngo 1.19\n' > "$mod/go.mod"
export TMPDIR="$work/tmp" GOFLAGS=-mod=mod GOTOOLCHAIN=local GO111MODULE=on GOPROXY=off
export GOCACHE="${GOCACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/go-build}"
cd "$mod"
# Kitsoki's tests that fail on the unmodified package (checked with only Kitsoki's files
# in the module), and why. They are run and reported, never counted:
#   TestSupervisedSemanticActivityTimeoutIgnoresThinkingTokens (always fails): its fixture
#     prints `{\"type\":\"system\",...}` (backslash-escaped quotes inside single quotes
#     reach printf), which is not JSON, so the semantic filter counts every line as
#     activity and the run is never killed.
#   TestSupervisedUsesTempHomeAndAllowlistedEnv, TestSupervisedCanExplicitlyInheritHomeForProviderAuth
#     (fail about 60% of runs): supervised.go calls cmd.Wait() before its stdout/stderr
#     copies are done, and os/exec closes the pipes in Wait, so a fast command's output
#     is lost (stdout "").
known_failing=(TestSupervisedSemanticActivityTimeoutIgnoresThinkingTokens
  TestSupervisedUsesTempHomeAndAllowlistedEnv
  TestSupervisedCanExplicitlyInheritHomeForProviderAuth)
if [ "$#" -gt 0 ]; then
  exec go test -count=1 "$@" .
fi
go vet .
names="$(go test -list . | grep '^Test' || true)"
keep=()
for n in $names; do
  skip=
  for k in "${known_failing[@]}"; do [ "$n" = "$k" ] && skip=1; done
  [ -n "$skip" ] || keep+=("$n")
done
re() { local IFS='|'; echo "^($*)\$"; }
go test -count=1 -v -run "$(re "${keep[@]}")" . | grep -E '^(--- |    |ok|FAIL|PASS)'
for k in "${known_failing[@]}"; do
  if go test -count=1 -run "^$k\$" . >/dev/null 2>&1; then r=passed; else r=failed; fi
  echo "test-kitsoki: known failing as shipped (not counted): $k $r"
done
