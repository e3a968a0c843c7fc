#!/usr/bin/env bash
# Benchmark of the launch-policy gate: `capsule policy check` in a git repository with
# 100,000 files (on tmpfs), side by side with `true`, reporting medians and the gate's own
# cost (median of the check minus median of `true`). Target: under 5 ms of its own.
#
# It also shows that the check does not walk the tree:
#   * the same check in a repository with 1,000 files costs the same (ratio ~1.0);
#   * under strace, the check makes no getdents64 call inside the repository and opens
#     only a handful of paths.
#
# Usage: hack/bench-policy.sh [FILES]      (default 100000)
# Env:   CAPSULE_BIN=path/to/capsule       (default: target/release/capsule, built if missing)
#        RUNS=N                            (rounds of the timing loop and hyperfine runs, default 200)
# Medians come from an interleaved timing loop (robust to load from other work); hyperfine
# (Debian package `hyperfine`), when installed, also prints its own report.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-100000}
RUNS=${RUNS:-200}
BIN=${CAPSULE_BIN:-target/release/capsule}
if [ ! -x "$BIN" ]; then
  echo "building release binary..." >&2
  cargo build --release -p capsule-runtime >&2
fi
BIN=$(realpath "$BIN")
BASE=$(mktemp -d /dev/shm/bench-policy.XXXXXX)
trap 'rm -rf "$BASE"' EXIT

export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid

# make_repo DIR NFILES: a committed repository with NFILES files in 100 directories, a
# .kitsoki.yaml with the gate enabled, and the working directory carved out (allowed).
make_repo() {
  local dir=$1 n=$2 per=$(( ($2 + 99) / 100 ))
  mkdir -p "$dir"
  (
    cd "$dir"
    git init -q -b main
    python3 - "$n" "$per" <<'EOF'
import os, sys
n, per = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    d = f"d{i // per:02d}"
    if i % per == 0:
        os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i}.txt", "w") as f:
        f.write(f"{i}\n")
EOF
    cat > .kitsoki.yaml <<'EOF'
agent_launch_policy:
  enabled: true
  require_capsule: false
  protected_roots: [.]
  allowed_roots: [./d42]
  protected_branches: [trunk, integration/*]
EOF
    git add -A
    git commit -q -m files
  )
}

echo "creating repositories ($FILES and 1000 files) under $BASE ..." >&2
make_repo "$BASE/big" "$FILES"
make_repo "$BASE/small" 1000
echo "tracked files: big $(git -C "$BASE/big" ls-files | wc -l), small $(git -C "$BASE/small" ls-files | wc -l)" >&2
for r in big small; do
  (cd "$BASE/$r" && "$BIN" policy check --working-dir d42 >/dev/null) || {
    echo "policy check is not allowed in $BASE/$r/d42; the benchmark expects an allowed decision" >&2
    exit 1
  }
done

CHECK_BIG="cd $BASE/big && $BIN policy check --working-dir d42 --json >/dev/null"
CHECK_SMALL="cd $BASE/small && $BIN policy check --working-dir d42 --json >/dev/null"
TRUE="cd $BASE/big && /bin/true"
VERSION="cd $BASE/big && $BIN --version >/dev/null"

# Interleaved timing loop: each round runs every command once, in turn, so load from other
# work on the machine hits all of them alike. Prints medians in ms: true, --version, big, small.
interleaved() {
  python3 - "$BIN" "$BASE" "$RUNS" <<'EOF'
import subprocess, sys, time, statistics
bin_, base, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
cmds = [
    (["/bin/true"], f"{base}/big"),
    ([bin_, "--version"], f"{base}/big"),
    ([bin_, "policy", "check", "--working-dir", "d42", "--json"], f"{base}/big"),
    ([bin_, "policy", "check", "--working-dir", "d42", "--json"], f"{base}/small"),
]
ts = [[] for _ in cmds]
for r in range(runs + 10):
    for i, (argv, cwd) in enumerate(cmds):
        t = time.perf_counter()
        subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, check=False)
        if r >= 10:  # warm-up rounds
            ts[i].append((time.perf_counter() - t) * 1000)
print(" ".join(f"{statistics.median(x):.3f}" for x in ts))
EOF
}

if command -v hyperfine >/dev/null; then
  # hyperfine's own report, for the eye; the numbers below come from the interleaved loop
  hyperfine -N --warmup 20 --runs "$RUNS" \
    -n true "sh -c '$TRUE'" \
    -n "capsule --version" "sh -c '$VERSION'" \
    -n "policy check, $FILES files" "sh -c '$CHECK_BIG'" \
    -n "policy check, 1000 files" "sh -c '$CHECK_SMALL'" >&2
fi
read -r T_TRUE T_VERSION T_BIG T_SMALL < <(interleaved)

# CPU time per run from perf (task-clock): robust when other work shares the machine.
CPU="n/a (perf not usable)"
if command -v perf >/dev/null && perf stat -r 1 /bin/true >/dev/null 2>&1; then
  clock() { (cd "$BASE/big" && perf stat -x, -e task-clock -r "$RUNS" "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ {printf "%.3f", $1}'); }
  C_TRUE=$(clock /bin/true)
  C_VERSION=$(clock "$BIN" --version)
  C_BIG=$(clock "$BIN" policy check --working-dir d42)
  CPU="true $C_TRUE ms, capsule --version $C_VERSION ms, policy check $C_BIG ms (task-clock, mean of $RUNS)"
fi

# Does it walk the tree? Count directory reads and opens under the repository.
WALK="n/a (strace not installed)"
if command -v strace >/dev/null; then
  log=$BASE/strace.log
  (cd "$BASE/big" && strace -f -qq -y -e trace=getdents64,openat,statx,newfstatat,lstat,stat -o "$log" \
    "$BIN" policy check --working-dir d42 >/dev/null)
  listed=$(grep 'getdents64(' "$log" | grep -o '<[^>]*>' | sort -u | tr '\n' ' ' || true)
  tree_reads=$(grep 'getdents64(' "$log" | grep "<$BASE/big" | grep -vc "<$BASE/big/.git" || true)
  under=$(grep -c "$BASE/big" "$log" || true)
  WALK="directories listed: ${listed:-none}; listings of the work tree: $tree_reads; syscalls naming a path in the repo: $under (the repo has $FILES files)"
fi

python3 - "$T_TRUE" "$T_BIG" "$T_SMALL" "$FILES" "$WALK" "$T_VERSION" "$CPU" <<'EOF'
import sys
t_true, t_big, t_small = map(float, sys.argv[1:4])
files, walk, t_version, cpu = sys.argv[4], sys.argv[5], float(sys.argv[6]), sys.argv[7]
own = t_big - t_true
print(f"median `true`                          : {t_true:8.3f} ms")
print(f"median `capsule --version`             : {t_version:8.3f} ms   (process start-up, no gate)")
print(f"median `capsule policy check` ({files:>6} files): {t_big:8.3f} ms   (ratio to true {t_big / t_true:5.2f})")
print(f"median `capsule policy check` (  1000 files): {t_small:8.3f} ms")
print(f"gate's own cost (check - true)        : {own:8.3f} ms   target < 5 ms: {'PASS' if own < 5 else 'FAIL'}")
print(f"gate alone (check - --version)        : {t_big - t_version:8.3f} ms")
print(f"{files} files vs 1000 files          : ratio {t_big / t_small:5.2f} (1.0 = independent of tree size)")
print(f"cpu time                              : {cpu}")
print(f"tree walk                             : {walk}")
EOF
