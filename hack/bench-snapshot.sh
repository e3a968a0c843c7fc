#!/usr/bin/env bash
# Benchmark: what the exec record's workspace snapshots cost.
#
#   capsule exec bench -- /bin/true   (BIN)   vs   BASE_BIN (an older capsule)   vs   bwrap
#
# on a one-file repository, interleaved rounds (one of each per round), medians; then the
# snapshots alone, from BIN's own debug timings (`snapshot before: took …`, and `command
# ended` → `snapshot after`). BIN defaults to target/release/capsule (build it first:
# `cargo build --release -p capsule-runtime`); both binaries are measured as copies in
# /dev/shm (a freshly linked binary starts slower). Not a test: run it by hand,
# `[BIN=…] [BASE_BIN=…] hack/bench-snapshot.sh [RUNS]`; needs bubblewrap.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-200}"
BIN="${BIN:-$PWD/target/release/capsule}"
command -v bwrap >/dev/null || { echo "bwrap missing: apt-get install -y bubblewrap" >&2; exit 1; }

# shellcheck source=hack/bench-capsule.sh
. hack/bench-capsule.sh snapshot

python3 - "$RUNS" "$BIN" "$WS" "${BWRAP[*]}" "${BASE_BIN:-}" <<'EOF'
import os, re, statistics, subprocess, sys, time, shlex
runs, bin_, ws, bwrap, base = int(sys.argv[1]), sys.argv[2], sys.argv[3], shlex.split(sys.argv[4]), sys.argv[5]
variants = [("bwrap, equivalent policy", bwrap + ["/bin/true"]),
            ("capsule exec", [bin_, "exec", "bench", "--", "/bin/true"])]
if base:
    variants.append(("BASE capsule exec", [base, "exec", "bench", "--", "/bin/true"]))
warm = max(5, runs // 20)
times = {n: [] for n, _ in variants}
for r in range(warm + runs):
    for n, argv in variants:
        s = time.perf_counter()
        subprocess.run(argv, cwd=ws, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        if r >= warm:
            times[n].append((time.perf_counter() - s) * 1000)
bw = statistics.median(times[variants[0][0]])
print(f"{'variant':30} {'median ms':>10} {'vs bwrap':>9}")
for n, _ in variants:
    m = statistics.median(times[n])
    print(f"{n:30} {m:10.2f} {m / bw:9.2f}")
# the snapshots alone, from the debug timings
num = r"([0-9.]+)(ms|µs|ns|s)"
unit = {"s": 1e3, "ms": 1.0, "µs": 1e-3, "ns": 1e-6}
ms = lambda m: float(m[0]) * unit[m[1]]
before, after = [], []
env = dict(os.environ, RUST_LOG="capsule_runtime=debug", NO_COLOR="1")
for _ in range(runs // 2):
    o = subprocess.run([bin_, "exec", "bench", "--", "/bin/true"], cwd=ws, env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True).stderr
    o = re.sub(r"\x1b\[[0-9;]*m", "", o)
    b = re.search(r"snapshot before: took " + num, o)
    e = re.search(r"command ended: " + num, o)
    a = re.search(r"snapshot after: " + num, o)
    if b:
        before.append(ms(b.groups()))
    if e and a:
        after.append(ms(a.groups()) - ms(e.groups()))
if before and after:
    print(f"\nsnapshot before {statistics.median(before) * 1000:.0f} µs, after {statistics.median(after) * 1000:.0f} µs"
          f" (medians of {len(before)} runs with debug logging)")
print(f"({runs} interleaved rounds)")
EOF
