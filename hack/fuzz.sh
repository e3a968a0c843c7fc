#!/bin/sh
# Property tests run longer: each target with PROPTEST_CASES scaled to MINUTES (default 1)
# per target; prints cases run and findings per target. Usage: hack/fuzz.sh [MINUTES]
set -u
cd "$(dirname "$0")/.."
MIN="${1:-1}"
# proptest cases per minute, per target (measured on the 2-CPU build machine)
RATE=150000
CASES=$((MIN * RATE))
for t in "capsule-runtime net::allowlist_props::parsing_any_text_never_panics" \
         "capsule-runtime net::allowlist_props::decision_equals_the_reference_model"; do
    set -- $t
    start=$(date +%s)
    if PROPTEST_CASES=$CASES timeout $((MIN * 60 + 120)) cargo test -q -p "$1" --lib "$2" -- --exact >/tmp/fuzz.$$ 2>&1; then
        found=0
    else
        found=1
    fi
    echo "$2: $CASES cases in $(( $(date +%s) - start )) s, findings: $found"
    [ "$found" = 0 ] || grep -E 'minimal failing|panicked' /tmp/fuzz.$$ | head -5
done
rm -f /tmp/fuzz.$$
