#!/bin/sh
# Property tests run longer: each target with PROPTEST_CASES scaled to MINUTES (default 1;
# fractions allowed, e.g. 0.2) per target; prints per target the cases run, the seconds
# taken and the findings (with proptest's minimal failing input when there is one).
# Usage: hack/fuzz.sh [MINUTES]
# FUZZ_SHARD=I/N runs only every Nth target from the Ith (0-based), so that N runs side by
# side share the targets (e.g. `FUZZ_SHARD=0/2` and `FUZZ_SHARD=1/2` on two CPUs).
set -u
cd "$(dirname "$0")/.."
MIN="${1:-1}"
case "$MIN" in
    '' | *[!0-9.]* | *.*.* | .)
        echo "usage: hack/fuzz.sh [MINUTES]" >&2
        exit 2
        ;;
esac
# crate, test (path in its library), proptest cases per minute of that test on the 2-CPU
# build machine (measured in a debug build, rounded down by about a fifth)
TARGETS="
capsule-bundle spec_props::parsing_any_text_never_panics 30000
capsule-bundle spec_props::step_paths_stay_inside_the_workspace 45000
capsule-bundle manifest_props::reading_any_bytes_never_panics 85000
capsule-bundle manifest_props::generated_records_never_panic 60000
capsule-policy config::props::parsing_any_text_never_panics 25000
capsule-policy config::props::loaded_policy_and_decision_equal_the_reference_model 38000
capsule-runtime net::allowlist_props::parsing_any_text_never_panics 150000
capsule-runtime net::allowlist_props::decision_equals_the_reference_model 700000
capsule-runtime net::http_props::parsing_any_bytes_never_panics 150000
capsule-runtime net::http_props::reading_a_head_splits_where_the_model_says 200000
capsule-runtime net::http_props::generated_requests_parse_to_their_host_and_port 140000
capsule-runtime net::http_props::the_parsed_destination_gets_the_reference_models_answer 550000
capsule-runtime net::socks_props::negotiating_on_any_bytes_never_panics 350000
capsule-runtime net::socks_props::generated_requests_give_their_destination_and_the_models_answer 340000
capsule-runtime net::dns_props::any_bytes_get_a_response_of_their_id_or_nothing 60000
capsule-runtime net::dns_props::a_query_for_a_name_gets_its_synthetic_address 140000
capsule-runtime net::sni_props::any_bytes_are_read_without_a_panic 100000
capsule-runtime net::sni_props::a_generated_hello_gives_its_name 300000
capsule-runtime record::snapshot::props::a_capped_read_gives_a_regular_file_within_its_cap_and_nothing_else 600000
capsule-runtime record::snapshot::props::any_index_is_read_without_a_panic_and_gives_only_workspace_paths 80000
capsule-runtime record::snapshot::props::head_resolves_only_to_an_id_written_under_git 40000
capsule-runtime home::layer::props::a_diff_applied_to_the_old_text_gives_the_new 400000
capsule-runtime home::layer::props::the_walk_reports_the_models_changes_and_never_leaves_its_trees 50000
"
# build once, so that the seconds below are the tests' own
cargo test -q --no-run --lib -p capsule-bundle -p capsule-policy -p capsule-runtime >/dev/null 2>&1 || {
    echo "hack/fuzz.sh: the test build failed (cargo test --no-run --lib)" >&2
    exit 1
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
SHARD="${FUZZ_SHARD:-0/1}"
case "$SHARD" in
    [0-9]*/[0-9]*) ;;
    *)
        echo "hack/fuzz.sh: FUZZ_SHARD must be I/N (e.g. 0/2)" >&2
        exit 2
        ;;
esac
shard_i="${SHARD%/*}"
shard_n="${SHARD#*/}"
echo "$TARGETS" | grep . | awk -v i="$shard_i" -v n="$shard_n" '(NR - 1) % n == i' | while read -r crate test rate; do
    [ -n "$crate" ] || continue
    cases=$(awk -v m="$MIN" -v r="$rate" 'BEGIN { c = int(m * r); print (c < 1 ? 1 : c) }')
    limit=$(awk -v m="$MIN" 'BEGIN { print int(m * 60 * 3) + 60 }')
    start=$(date +%s.%N)
    PROPTEST_CASES=$cases timeout "$limit" cargo test -q -p "$crate" --lib "$test" -- --exact >"$out" 2>&1
    rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" = 0 ]; then
        echo "$test: $cases cases in $secs s, findings: 0"
    elif [ "$rc" = 124 ]; then
        echo "$test: timed out after $secs s (of $cases cases), findings: none seen"
    else
        done_cases=$(sed -n 's/^[[:space:]]*successes: \([0-9]*\).*/\1/p' "$out" | tail -n 1)
        echo "$test: failed after ${done_cases:-?} of $cases cases in $secs s, findings: 1"
        grep -E 'Test failed|minimal failing|panicked' "$out" | head -n 5 | sed 's/^/    /'
    fi
done
