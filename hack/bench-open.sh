#!/usr/bin/env bash
# Benchmark: `capsule open --source` of a checkout with N files (default 20,000) side by
# side with `git clone --local`, `git clone --no-hardlinks` and `git worktree add` of the
# same checkout. Reports medians and ratios. Target: open --source no slower than
# `git worktree add`.
#
# Usage: hack/bench-open.sh [FILES] [RUNS]
#   CAPSULE_BIN=path   binary to measure (default: target/release/capsule, built if missing)
#   BENCH_DIR=path     scratch folder (default: a new folder in /dev/shm, else /tmp)
# Runs are interleaved (a loop of `date +%s%N`); BENCH_HYPERFINE=1 uses hyperfine instead.
set -euo pipefail

FILES=${1:-20000}
RUNS=${2:-7}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CAPSULE_BIN:-$HERE/target/release/capsule}
if [ ! -x "$BIN" ]; then
  echo "building release binary..." >&2
  (cd "$HERE" && cargo build --release -p capsule-runtime --bin capsule >&2)
fi
BASE=/dev/shm; [ -d "$BASE" ] || BASE=/tmp
WORK=${BENCH_DIR:-$(mktemp -d "$BASE/capsule-bench-open.XXXXXX")}
trap 'rm -rf "$WORK"' EXIT
SRC=$WORK/src
export CAPSULE_ROOT=$WORK/root

# hermetic git for building the fixture and for the git baselines
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid

echo "fixture: $FILES files in $SRC" >&2
mkdir -p "$SRC"
python3 - "$SRC" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
per = 100
for i in range(n):
    d = os.path.join(root, f"pkg{i // per:04d}", f"mod{(i // 10) % 10}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"file{i:06d}.txt"), "w") as f:
        f.write(f"file {i}\n" + "x" * (i % 700) + "\n")
PY
git -C "$SRC" init -q -b main
git -C "$SRC" config gc.auto 0
git -C "$SRC" add -A
git -C "$SRC" commit -q -m fixture
git -C "$SRC" gc -q
echo "fixture: $(git -C "$SRC" ls-files | wc -l) tracked files, $(du -sh "$SRC/.git" | cut -f1) .git" >&2

CMD_CAPSULE="n=\$(date +%s%N); $BIN open --source $SRC --name b\$n --dest $WORK/o/c\$n >/dev/null"
CMD_CLONE="n=\$(date +%s%N); git clone -q --local $SRC $WORK/o/g\$n"
CMD_CLONE_NH="n=\$(date +%s%N); git clone -q --local --no-hardlinks $SRC $WORK/o/h\$n"
CMD_WT="n=\$(date +%s%N); git -C $SRC worktree add -q --detach $WORK/o/w\$n"
CLEAN="rm -rf $WORK/o $CAPSULE_ROOT; git -C $SRC worktree prune; mkdir -p $WORK/o"
eval "$CLEAN"

# Interleaved runs (each round runs every command once) so that load drift on a shared
# machine hits all commands alike; medians per command.
NAMES=(capsule-open-source git-clone-local git-clone-no-hardlinks git-worktree-add)
CMDS=("$CMD_CAPSULE" "$CMD_CLONE" "$CMD_CLONE_NH" "$CMD_WT")
RESULTS=$WORK/results.txt
if [ "${BENCH_HYPERFINE:-0}" = 1 ] && command -v hyperfine >/dev/null 2>&1; then
  hyperfine -N --runs "$RUNS" --warmup 1 --prepare "bash -c '$CLEAN'" --export-json "$WORK/h.json" \
    -n capsule-open-source "bash -c '$CMD_CAPSULE'" \
    -n git-clone-local "bash -c '$CMD_CLONE'" \
    -n git-clone-no-hardlinks "bash -c '$CMD_CLONE_NH'" \
    -n git-worktree-add "bash -c '$CMD_WT'" >&2
  python3 - "$WORK/h.json" > "$RESULTS" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(r["command"], "%.1f" % (r["median"] * 1000))
PY
else
  : > "$WORK/raw.txt"
  for round in $(seq 0 "$RUNS"); do # round 0 is a warm-up
    for k in "${!CMDS[@]}"; do
      eval "$CLEAN"
      s=$(date +%s%N); bash -c "${CMDS[$k]}"; e=$(date +%s%N)
      [ "$round" = 0 ] || echo "${NAMES[$k]} $(( (e - s) / 1000 ))" >> "$WORK/raw.txt"
    done
  done
  for n in "${NAMES[@]}"; do
    grep "^$n " "$WORK/raw.txt" | awk '{print $2}' | sort -n | awk -v n="$n" '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%s %.1f\n", n, m/1000}'
  done > "$RESULTS"
fi
eval "$CLEAN"

echo
echo "capsule open --source vs git, $FILES files, median of $RUNS runs (ms)"
awk '{v[$1]=$2; o[NR]=$1} END {
  c=v["capsule-open-source"];
  for (k=1; k<=NR; k++) { n=o[k]; printf "  %-24s %9.1f ms   capsule/this = %.2fx\n", n, v[n], c/v[n] }
  w=v["git-worktree-add"];
  printf "target (no slower than git worktree add): %s\n", (c <= w*1.0) ? "met" : "NOT met";
}' "$RESULTS"
