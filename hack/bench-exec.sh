#!/usr/bin/env bash
# Benchmark: the cost of starting a command in a capsule's sandbox.
#
#   capsule exec <capsule> -- /bin/true    vs    /bin/true bare
#                                           vs    bwrap with an equivalent policy
#                                           vs    runc run of an equivalent bundle (if runc is installed)
# and the same with 200 hidden paths (capsule: --hide x200; bwrap: --tmpfs x200), and
# capsule with limits (cgroups for memory, processes and CPU, as root; rlimits).
#
# Prints median wall time per start (ms) and the ratio to bwrap. capsule's rows use its
# prepared roots (built once per capsule and plan, a warm spare per exec: the first round
# spawns the holder and is a warm-up round); "root built per exec" turns them off
# (CAPSULE_PREPARED_IDLE=0). The variants run
# interleaved (one of each per round), so load from elsewhere on the machine slows them
# alike and the ratios stay meaningful. BASE_BIN=/path/to/older/capsule adds that binary's
# rows, for before/after comparisons of a change. Not a test: run it by hand
# (`[BIN=...] [BASE_BIN=...] hack/bench-exec.sh [RUNS]`; BIN defaults to the release build); needs bubblewrap
# (`apt-get install -y bubblewrap`), optionally runc (`apt-get install -y runc`, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-200}"

# the binary as installed (hack/build-release.sh: release profile, static-pie on Linux)
BIN="${BIN:-$(hack/build-release.sh)}"
command -v bwrap >/dev/null || { echo "bwrap missing: apt-get install -y bubblewrap" >&2; exit 1; }
# how much of the link order (hack/build-release.sh) the measured binary still has
if command -v nm >/dev/null; then BIN="$BIN" hack/exec-order.sh --check; fi

# shellcheck source=hack/bench-capsule.sh
. hack/bench-capsule.sh exec

HIDE_ARGS=()
BWRAP_HIDE=()
for i in $(seq 1 200); do
  mkdir -p "$HOME/hidden/d$i"
  HIDE_ARGS+=(--hide "$HOME/hidden/d$i")
  BWRAP_HIDE+=(--tmpfs "$HOME/hidden/d$i")
done

RUNC_OK=0
if command -v runc >/dev/null && [ "$(id -u)" = 0 ]; then
  B="$W/runc"
  mkdir -p "$B/rootfs"
  (cd "$B" && runc spec)
  python3 - "$B/config.json" "$WS" <<'EOF'
import json, sys
p, ws = sys.argv[1], sys.argv[2]
c = json.load(open(p))
c["root"] = {"path": "rootfs", "readonly": True}
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/true"]
c["process"]["cwd"] = "/"
for d in ["/usr", "/etc", "/opt", "/var"]:
    c["mounts"].append({"destination": d, "type": "bind", "source": d, "options": ["rbind", "ro"]})
for l in ["bin", "sbin", "lib", "lib64"]:
    c["mounts"].append({"destination": "/" + l, "type": "bind", "source": "/" + l, "options": ["rbind", "ro"]})
c["mounts"].append({"destination": ws, "type": "bind", "source": ws, "options": ["rbind", "rw"]})
c["linux"]["namespaces"] = [{"type": t} for t in ["pid", "network", "ipc", "uts", "mount"]]
json.dump(c, open(p, "w"))
EOF
  for d in usr etc opt var bin sbin lib lib64 proc dev sys tmp; do mkdir -p "$B/rootfs/$d"; done
  mkdir -p "$B/rootfs$WS"
  if runc run --bundle "$B" bench-probe >/dev/null 2>&1; then RUNC_OK=1; fi
fi

python3 - "$RUNS" "$RUNC_OK" "$BIN" "$WS" "$W" "${BWRAP[*]}" "${HIDE_ARGS[*]}" "${BWRAP_HIDE[*]}" "${BASE_BIN:-}" <<'EOF'
import os, statistics, subprocess, sys, time, shlex
runs, runc_ok, bin_, ws, w = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
bwrap = shlex.split(sys.argv[6]); hide = shlex.split(sys.argv[7]); bhide = shlex.split(sys.argv[8])
base = sys.argv[9]
# memory, processes and CPU (cgroups) and descriptors, file size (rlimits): only when the
# caller can make cgroups (root here; else an exec with limits is refused)
limits = ["--memory", "4G", "--pids", "4096", "--cpus", "1.5", "--fds", "4096", "--file-size", "1G"]
if os.geteuid() != 0:
    limits = ["--fds", "4096", "--file-size", "1G"]
env = dict(os.environ)
env_built = dict(env, CAPSULE_PREPARED_IDLE="0")
counter = [0]
def runc():
    counter[0] += 1
    return ["runc", "run", "--bundle", w + "/runc", "bench-%d" % counter[0]]
variants = [
    ("/bin/true (bare)", lambda: ["/bin/true"]),
    ("bwrap, equivalent policy", lambda: bwrap + ["/bin/true"]),
    ("capsule exec", lambda: [bin_, "exec", "bench", "--", "/bin/true"]),
    ("bwrap + 200 hidden paths", lambda: bwrap + bhide + ["/bin/true"]),
    ("capsule exec + 200 hidden paths", lambda: [bin_, "exec", "bench"] + hide + ["--", "/bin/true"]),
    ("capsule exec, root built per exec", lambda: [bin_, "exec", "bench", "--", "/bin/true"]),
]
if base:
    variants += [
        ("BASE capsule exec", lambda: [base, "exec", "bench", "--", "/bin/true"]),
        ("BASE capsule exec + 200 hidden", lambda: [base, "exec", "bench"] + hide + ["--", "/bin/true"]),
    ]
if runc_ok:
    variants.append(("runc run (bundle, root)", runc))
# interleaved rounds: every variant once per round (runc every 4th), so a busy machine
# slows them alike, in an order shuffled per round (each tool's asynchronous teardown,
# e.g. a network namespace freed by a kernel worker after bwrap exits, or capsule's holder
# replacing a spare, lands on a random next variant, not always the same one); the first
# rounds warm up and are not counted
import random
rng = random.Random(4)
warm = max(5, runs // 20)
times = {name: [] for name, _ in variants}
for r in range(warm + runs):
    order = list(variants)
    rng.shuffle(order)
    for name, argv in order:
        if name.startswith("runc") and r % 4:
            continue
        s = time.perf_counter()
        e = env_built if name.endswith("root built per exec") else env
        subprocess.run(argv(), cwd=ws, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        if r >= warm:
            times[name].append((time.perf_counter() - s) * 1000)
rows = [(name, statistics.median(times[name])) for name, _ in variants]
if not runc_ok:
    rows.append(("runc run (needs runc, as root)", float("nan")))
med = dict(rows)
bw = med["bwrap, equivalent policy"]
print(f"{'variant':36} {'median ms':>10} {'vs bwrap':>9}")
for name, m in rows:
    print(f"{name:36} {m:10.2f} {m / bw:9.2f}")
line = f"\n200 hidden paths add: capsule {med['capsule exec + 200 hidden paths'] - med['capsule exec']:.2f} ms, bwrap {med['bwrap + 200 hidden paths'] - bw:.2f} ms"
if base:
    line += f", BASE capsule {med['BASE capsule exec + 200 hidden'] - med['BASE capsule exec']:.2f} ms"
print(line + f"  ({runs} interleaved rounds, medians)")

# limits in a pass of their own, interleaved with plain execs: a spare that waits in
# cgroups is moved there by its holder, and the kernel's work for those moves slows
# whatever runs beside it, so it would skew the rows above
lim = {"plain": [], "limits": []}
for r in range(warm + runs):
    pair = [("plain", [bin_, "exec", "bench", "--", "/bin/true"]),
            ("limits", [bin_, "exec", "bench"] + limits + ["--", "/bin/true"])]
    rng.shuffle(pair)
    for name, argv in pair:
        s = time.perf_counter()
        subprocess.run(argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        if r >= warm:
            lim[name].append((time.perf_counter() - s) * 1000)
lp, ll = statistics.median(lim["plain"]), statistics.median(lim["limits"])
print(f"limits ({' '.join(limits)}): {ll:.2f} ms vs {lp:.2f} ms without, add {ll - lp:.2f} ms  (own pass, {runs} rounds)")

# back to back: the same start many times in a row, as a script running command after
# command does; per start, the mean over the batch (work a tool defers past its own exit,
# such as capsule's holder making the next spare, is paid inside the batch)
batch = max(50, runs // 2)
print(f"\nback to back ({batch} starts in a row, ms per start):")
for name, argv in variants:
    if name.startswith("runc") or name.startswith("BASE") or name.startswith("/bin/true"):
        continue
    e = env_built if name.endswith("root built per exec") else env
    s = time.perf_counter()
    for _ in range(batch):
        subprocess.run(argv(), cwd=ws, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    print(f"  {name:36} {(time.perf_counter() - s) * 1000 / batch:8.2f}")
EOF
