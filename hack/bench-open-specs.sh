#!/usr/bin/env bash
# Benchmark: `capsule open` of all of Kitsoki's capsules (synthetic specs), one after the
# other, with an old binary (steps on the host) and a new one (steps in the build
# sandbox), interleaved rounds on a tmpfs capsule root. Reports each round's total, the
# medians and the ratio new/old, and checks both give the same HEAD and tree digest for
# every capsule. Budget: the sandboxed build at most 1.30x the old one.
#
# Usage: hack/bench-open-specs.sh OLD_BIN [NEW_BIN] [ROUNDS]
#   NEW_BIN   default target/release/capsule (built if missing)
#   ROUNDS    default 3
#   KITSOKI_CAPSULES=path   the spec library (default ../shared/kitsoki-capsules)
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
OLD=${1:?usage: hack/bench-open-specs.sh OLD_BIN [NEW_BIN] [ROUNDS]}
NEW=${2:-$HERE/target/release/capsule}
ROUNDS=${3:-3}
LIB=${KITSOKI_CAPSULES:-$HERE/../shared/kitsoki-capsules}
if [ ! -x "$NEW" ]; then
  echo "building release binary..." >&2
  (cd "$HERE" && cargo build --release -p capsule-runtime --bin capsule >&2)
fi
BASE=/dev/shm; [ -d "$BASE" ] || BASE=/tmp
WORK=$(mktemp -d "$BASE/capsule-bench-specs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SPECS=()
for d in "$LIB"/*/; do
  [ -f "$d/capsule.yaml" ] && SPECS+=("$d/capsule.yaml")
done
echo "${#SPECS[@]} specs from $LIB" >&2

# open every spec with $1 into capsule root $2; print the wall time in ms
open_all() {
  local bin=$1 root=$2 t0 t1
  rm -rf "$root"
  t0=$(date +%s%N)
  for s in "${SPECS[@]}"; do
    CAPSULE_ROOT=$root "$bin" open "$s" --json >>"$root.json" || { echo "open $s failed" >&2; exit 1; }
  done
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

old_t=() new_t=()
for r in $(seq 1 "$ROUNDS"); do
  rm -f "$WORK/old.json" "$WORK/new.json"
  o=$(open_all "$OLD" "$WORK/old")
  n=$(open_all "$NEW" "$WORK/new")
  old_t+=("$o") new_t+=("$n")
  echo "round $r: old ${o} ms, new ${n} ms" >&2
done

# the same commit ids and digests
python3 - "$WORK/old.json" "$WORK/new.json" <<'PY'
import json, sys
def load(p):
    dec, out, text = json.JSONDecoder(), {}, open(p).read()
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        j, i = dec.raw_decode(text, i)
        out[j["name"]] = (j["head"], j["tree_digest"])
    return out
old, new = load(sys.argv[1]), load(sys.argv[2])
bad = [n for n in old if old[n] != new.get(n)]
print(f"{len(old)} capsules: HEAD and tree digest identical: {'yes' if not bad else 'NO: ' + ', '.join(bad)}")
sys.exit(1 if bad else 0)
PY

mo=$(printf '%s\n' "${old_t[@]}" | median)
mn=$(printf '%s\n' "${new_t[@]}" | median)
echo "open of ${#SPECS[@]} specs, median of $ROUNDS rounds: old $mo ms, new $mn ms, ratio $(awk -v a="$mn" -v b="$mo" 'BEGIN {printf "%.2f", a / b}') (budget <= 1.30)"
