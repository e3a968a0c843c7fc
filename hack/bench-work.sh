#!/usr/bin/env bash
# Benchmark: real work inside a capsule, side by side with the same work bare and under
# bwrap with an equivalent policy (read-only root, writable workspace and /tmp, no
# network):
#
#   unpack     tar -xf of 50,000 small files (100 per folder) from a tarball in /tmp
#              (on /dev/shm) into the workspace: how `npm install` and `git checkout` write
#   cargo      `cargo build --offline` (debug) of a small binary crate depending on the
#              real crates aho-corasick 1.1.5 and memchr 2.8.3, from the home's cargo cache
#              (a copy of this machine's ~/.cargo/registry index and those two .crate files;
#              the capsule sees it as its cache overlay, bwrap as a bind); target/ removed
#              before each round, outside the timing
#   git-status `git status --porcelain` in a checkout of 100,000 files and 10,000 commits
#              (/var/tmp/open-bench/gen.py; the fixture is made once under /var/tmp)
#   unittest   `python3 -m unittest` of eight of CPython's own test modules (shutil,
#              tempfile, pathlib, glob, json, csv, fileinput, filecmp), TMPDIR=/tmp
#
# Each round runs every workload under every variant once, in an order shuffled per round
# (a busy machine slows them alike); round 0 warms up and is not counted. Prints the median
# seconds per workload and variant and the ratios to bare and to bwrap, as a markdown table.
# capsule rows: `capsule exec --quiet-refusals NAME -- CMD` (the exec record and its
# workspace snapshots included, as a user pays them); BASE_BIN adds an older binary's rows;
# CAPSULE_EXEC_ARGS adds options to every exec of BIN; the workloads in NO_LIST_WRITES
# (default "unpack git-status") get a row of BIN with `--no-list-writes` too (refused writes
# not listed: no supervisor round trip per write call).
#
# Usage: [BIN=...] [BASE_BIN=...] [WORKLOADS="unpack cargo git-status unittest"]
#        hack/bench-work.sh [ROUNDS]      (ROUNDS default 5)
# Needs bwrap, tar, git, python3 and a Rust toolchain; not a test: run it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-5}"
WORKLOADS="${WORKLOADS:-unpack cargo git-status unittest}"
BIN="${BIN:-$(hack/build-release.sh)}"
command -v bwrap >/dev/null || { echo "bwrap missing: apt-get install -y bubblewrap" >&2; exit 1; }

# the tools, by their real paths (shims and proxies read $HOME, which is the scratch one)
PY="$(command -v python3)"
if command -v pyenv >/dev/null; then PY="$(pyenv which python3)"; fi
CARGO="$(rustup which cargo 2>/dev/null || command -v cargo)"
TOOLBIN="$(dirname "$CARGO")"
GIT="$(command -v git)"

# shellcheck source=hack/bench-capsule.sh
. hack/bench-capsule.sh work
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
G=(-c user.name=b -c user.email=b@example.invalid)

# unpack: the tarball in the capsule's /tmp
TMP_UNPACK="$TMPD"
if [[ " $WORKLOADS " == *" unpack "* ]]; then
  echo "fixture: 50,000 files in a tarball" >&2
  "$PY" - "$W/files" <<'EOF'
import os, sys
root = sys.argv[1]
for i in range(50000):
    d = os.path.join(root, f"p{i // 1000:02d}", f"m{(i // 100) % 10}")
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.js"), "w") as f:
        f.write(f"module.exports = {i};\n" + "// x\n" * (i % 20))
EOF
  tar -cf "$TMP_UNPACK/files.tar" -C "$W/files" . && rm -rf "$W/files"
fi

# cargo: a crate in a capsule of its own, the registry in the scratch home
if [[ " $WORKLOADS " == *" cargo "* ]]; then
  echo "fixture: a crate depending on aho-corasick, cargo cache in the scratch home" >&2
  REG="$HOME/.cargo/registry"
  mkdir -p "$REG/cache"
  cp -a ~root/.cargo/registry/index "$REG/"
  for d in ~root/.cargo/registry/cache/*/; do
    mkdir -p "$REG/cache/$(basename "$d")"
    cp "$d"/aho-corasick-1.1.5.crate "$d"/memchr-2.8.3.crate "$REG/cache/$(basename "$d")/"
  done
  C="$W/crate-src"
  mkdir -p "$C/src"
  cat >"$C/Cargo.toml" <<'EOF'
[package]
name = "work-bench"
version = "0.1.0"
edition = "2021"

[dependencies]
aho-corasick = "=1.1.5"
memchr = "=2.8.3"
EOF
  cat >"$C/src/main.rs" <<'EOF'
fn main() {
    let ac = aho_corasick::AhoCorasick::new(["apple", "maple", "snapple"]).expect("patterns");
    let n = ac.find_iter("Nobody likes maple in their apple flavored Snapple.").count();
    println!("{n} {:?}", memchr::memchr(b'k', b"likes"));
}
EOF
  echo /target >"$C/.gitignore"
  (cd "$C" && PATH="$TOOLBIN:$PATH" "$CARGO" generate-lockfile --offline -q)
  git -C "$C" init -q && git -C "$C" add -A && git -C "$C" "${G[@]}" commit -qm crate
  "$BIN" open --source "$C" --name cargo >/dev/null
fi

# git-status: a checkout of the generated 100k-file repository
if [[ " $WORKLOADS " == *" git-status "* ]]; then
  FIX=/var/tmp/open-bench/gen100k
  if [ ! -d "$FIX/.git" ]; then
    echo "fixture: generating $FIX (100,000 files, 10,000 commits; once)" >&2
    mkdir -p "$FIX" && git -C "$FIX" init -q -b main
    "$PY" /var/tmp/open-bench/gen.py | git -C "$FIX" fast-import --quiet
    git -C "$FIX" checkout -q main
  fi
  echo "fixture: opening a capsule of $FIX" >&2
  "$BIN" open --source "$FIX" --name gits >/dev/null
fi

"$PY" - "$ROUNDS" "$BIN" "${BASE_BIN:-}" "$CAPSULE_ROOT" "$HOME" "$W" "$PY" "$TOOLBIN" "$GIT" "$WORKLOADS" "${CAPSULE_EXEC_ARGS:-}" "${NO_LIST_WRITES-unpack git-status}" <<'EOF'
import os, random, shlex, shutil, statistics, subprocess, sys, time
rounds, bin_, base, root, home, w, py, toolbin, git, workloads, extra, nolist = sys.argv[1:13]
nolist = set(nolist.split())
rounds = int(rounds)
workloads = workloads.split()
extra = shlex.split(extra)

def ws_of(name):
    return os.path.realpath(os.path.join(root, "workspaces", name))
def tmp_of(name):
    return os.path.join(root, "bundles", name, "tmp")

PATH = f"{toolbin}:{os.path.dirname(py)}:/usr/local/bin:/usr/bin:/bin"
base_env = {"PATH": PATH, "HOME": home, "LANG": "C.UTF-8", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null", "CARGO_TERM_QUIET": "true"}

def bwrap(ws, tmp, binds=()):
    a = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
         "--unshare-uts", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
         "--ro-bind", "/", "/", "--tmpfs", home + "/.ssh", "--dev", "/dev", "--proc", "/proc",
         "--bind", tmp, "/tmp", "--bind", ws, ws]
    for b in binds:
        a += ["--bind", b, b]
    return a + ["--chdir", ws]

# (capsule, command inside (argv, /tmp is the capsule's), extra env, cleanup before, bwrap binds)
def work(name):
    if name == "unpack":
        cap = "bench"; ws = ws_of(cap)
        def cmd(tmp): return ["sh", "-c", f"mkdir out && tar -xf {tmp}/files.tar -C out"]
        def clean(): shutil.rmtree(os.path.join(ws, "out"), ignore_errors=True)
        return cap, cmd, {}, clean, []
    if name == "cargo":
        cap = "cargo"; ws = ws_of(cap)
        def cmd(tmp): return ["cargo", "build", "--offline", "-q"]
        def clean(): shutil.rmtree(os.path.join(ws, "target"), ignore_errors=True)
        return cap, cmd, {}, clean, [home + "/.cargo/registry"]
    if name == "git-status":
        cap = "gits"
        def cmd(tmp): return ["git", "status", "--porcelain"]
        return cap, cmd, {}, lambda: None, []
    if name == "unittest":
        cap = "bench"
        mods = "shutil tempfile pathlib glob json csv fileinput filecmp".split()
        def cmd(tmp): return [py, "-m", "unittest", "-q"] + ["test.test_" + m for m in mods]
        return cap, cmd, {}, lambda: None, []
    raise SystemExit(f"unknown workload {name}")

variants = ["bare", "bwrap", "capsule"] + (["BASE capsule"] if base else [])
NL = "capsule --no-list-writes"
def variants_of(wl):
    return variants + ([NL] if wl in nolist else [])
def argv_env(variant, wl):
    cap, cmd, env_add, _, binds = work(wl)
    ws, tmp = ws_of(cap), tmp_of(cap)
    if variant == "bare":
        return cmd(tmp), dict(base_env, TMPDIR=tmp, **env_add), ws
    if variant == "bwrap":
        return bwrap(ws, tmp, binds) + cmd("/tmp"), dict(base_env, TMPDIR="/tmp", **env_add), ws
    b = base if variant == "BASE capsule" else bin_
    envs = []
    for k, v in dict(TMPDIR="/tmp", PATH=PATH, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null",
                     CARGO_TERM_QUIET="true", **env_add).items():
        envs += ["--env", f"{k}={v}"]
    more = extra if variant != "BASE capsule" else []
    if variant == NL:
        more = more + ["--no-list-writes"]
    # the toolchains live in root's home, hidden by default: shown read-only
    reveal = ["--reveal", os.path.dirname(os.path.dirname(toolbin)), "--reveal", os.path.dirname(os.path.dirname(py))]
    return [b, "exec", "--quiet-refusals"] + reveal + more + envs + [cap, "--"] + cmd("/tmp"), dict(os.environ), ws

rng = random.Random(29)
times = {(wl, v): [] for wl in workloads for v in variants_of(wl)}
for r in range(rounds + 1):
    order = list(times)
    rng.shuffle(order)
    for wl, v in order:
        work(wl)[3]()
        argv, env, cwd = argv_env(v, wl)
        s = time.perf_counter()
        p = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t = time.perf_counter() - s
        if p.returncode != 0:
            sys.exit(f"{wl} under {v} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-2000:]}")
        if r:
            times[(wl, v)].append(t)
    print(f"round {r} done", file=sys.stderr)
for wl in workloads:
    work(wl)[3]()

print(f"\n{rounds} interleaved rounds (shared 2-CPU machine), median seconds; ratios to bare and to bwrap\n")
cols = variants + ([NL] if nolist & set(workloads) else [])
print("| workload | " + " | ".join(cols) + " | capsule/bare | capsule/bwrap | bwrap/bare |"
      + (" BASE/bare |" if base else "") + (" no-list-writes/bare | no-list-writes/bwrap |" if NL in cols else ""))
print("|---" * (len(cols) + 4 + (1 if base else 0) + (2 if NL in cols else 0)) + "|")
for wl in workloads:
    m = {v: statistics.median(times[(wl, v)]) for v in variants_of(wl)}
    row = f"| {wl} | " + " | ".join(f"{m[v]:.3f}" if v in m else "" for v in cols)
    row += f" | {m['capsule'] / m['bare']:.2f} | {m['capsule'] / m['bwrap']:.2f} | {m['bwrap'] / m['bare']:.2f} |"
    if base:
        row += f" {m['BASE capsule'] / m['bare']:.2f} |"
    if NL in cols:
        row += (f" {m[NL] / m['bare']:.2f} | {m[NL] / m['bwrap']:.2f} |" if NL in m else " | |")
    print(row)
EOF
