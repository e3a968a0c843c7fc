#!/bin/sh
# Longer fault injection: every fault test of tests/tests/faults*.rs at full size, as
# root and as the unprivileged test user (when run as root), one test binary after the
# other, then a summary.
#
#   faults        kill -9 of open, exec and close (N iterations per runner)
#   faults_home   kill -9 of home apply and reveal add (N iterations per runner)
#   faults_disk   a full disk during open and during an exec's record
#   faults_load   50 capsules x 4 concurrent execs x 10 each
#   faults_proxy  1,000 proxy clients of which 100 send a byte a second
#
# Usage: hack/faults.sh [N]   (N defaults to 200; CAPSULE_FAULT_ITERS and
# CAPSULE_FAULT_LONG=1 are what the tests read)
set -eu
cd "$(dirname "$0")/.."
n="${1:-200}"
cargo build --workspace --bins
cargo test -p capsule-e2e --no-run \
  --test faults --test faults_home --test faults_disk --test faults_load --test faults_proxy
log=$(mktemp -d /dev/shm/capsule-faults.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$log"' EXIT
failed=0
summary=""
for t in faults faults_home faults_disk faults_load faults_proxy; do
  start=$(date +%s)
  if CAPSULE_FAULT_ITERS="$n" CAPSULE_FAULT_LONG=1 \
      cargo test -q -p capsule-e2e --test "$t" -- --test-threads=1 --nocapture \
      >"$log/$t.out" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=$((failed + 1))
  fi
  secs=$(( $(date +%s) - start ))
  summary="$summary$(printf '%-13s %-6s %4ss' "$t" "$status" "$secs")
"
  # what the tests said about themselves: one line per runner
  notes=$(grep -E '^\[[a-z0-9-]+\] ' "$log/$t.out" | grep -v 'panicked' || true)
  [ -n "$notes" ] && summary="$summary$(printf '%s\n' "$notes" | sed 's/^/    /')
"
  if [ "$status" = FAILED ]; then
    echo "=== $t failed:" >&2
    tail -n 60 "$log/$t.out" >&2
  fi
done
echo
echo "fault injection, $n iterations per runner:"
printf '%s' "$summary"
if [ "$failed" -ne 0 ]; then
  echo "$failed test binaries failed"
  exit 1
fi
echo "all passed"
