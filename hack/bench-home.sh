#!/usr/bin/env bash
# Benchmark of the task's own environment, side by side:
#   exec-true        `capsule exec c -- true`: the full sandbox, with the home overlay,
#                    12 package-cache overlays and the filtered ~/.npmrc
#   exec-nosandbox   `capsule exec c --no-sandbox -- true`: the same CLI path, no sandbox
#                    (the difference is the sandbox as a whole, home layer included)
#   first-exec       the first exec of a fresh capsule: it also records the home baseline
#                    (a home of ~HOMEFILES files on tmpfs)
#   home-diff        `capsule home diff c --json` over a layer of LAYERFILES text files
#   reveal-list      `capsule reveal list` of a source folder holding 200 manifests
# Medians (ms) of an interleaved loop; ratios against exec-nosandbox.
#
# Usage: hack/bench-home.sh                 Env: CAPSULE_BIN (default target/release/capsule,
#        RUNS=N (default 30), HOMEFILES (default 5000), LAYERFILES (default 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-30}
HOMEFILES=${HOMEFILES:-5000}
LAYERFILES=${LAYERFILES:-1000}
BIN=${CAPSULE_BIN:-target/release/capsule}
if [ ! -x "$BIN" ]; then
  echo "building release binary..." >&2
  cargo build --release -p capsule-runtime >&2
fi
BIN=$(realpath "$BIN")
BASE=$(mktemp -d /dev/shm/bench-home.XXXXXX)
trap 'rm -rf "$BASE"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid

H=$BASE/home
mkdir -p "$H/.config" "$H/.npm/_cacache" "$H/.cargo/registry" "$H/src/app"
printf 'registry=http://127.0.0.1:4873/\n//127.0.0.1:4873/:_authToken=x\n' > "$H/.npmrc"
# a home of HOMEFILES small files in 50 dot-folders
for d in $(seq 1 50); do
  mkdir -p "$H/.config/tool$d"
  for f in $(seq 1 $((HOMEFILES / 50))); do echo "k=$f" > "$H/.config/tool$d/f$f"; done
done
( cd "$H/src/app" && git init -q -b main && echo hi > README && git add . && git commit -qm init )
for i in $(seq 1 200); do
  mkdir -p "$H/src/app/crates/c$i"
  printf '[package]\nname = "c%s"\nversion = "0.1.0"\n[dependencies]\ns = { path = "../../../shared%s" }\n' "$i" "$i" > "$H/src/app/crates/c$i/Cargo.toml"
done
export HOME=$H CAPSULE_ROOT=$BASE/root
"$BIN" open --source "$H/src/app" --name c >/dev/null
"$BIN" exec c -- sh -c "for i in \$(seq 1 $LAYERFILES); do echo line\$i > ~/.config/new\$i; done" >/dev/null

now_ns() { date +%s%N; }
declare -A T
add() { T[$1]="${T[$1]:-} $2"; }
for i in $(seq 1 "$RUNS"); do
  s=$(now_ns); "$BIN" exec c -- true; add exec-true $(( $(now_ns) - s ))
  s=$(now_ns); "$BIN" exec c --no-sandbox -- true 2>/dev/null; add exec-nosandbox $(( $(now_ns) - s ))
  "$BIN" open --source "$H/src/app" --name "f$i" >/dev/null
  s=$(now_ns); "$BIN" exec "f$i" -- true; add first-exec $(( $(now_ns) - s ))
  "$BIN" close "f$i" >/dev/null 2>&1 || true
  s=$(now_ns); "$BIN" home diff c --json >/dev/null; add home-diff $(( $(now_ns) - s ))
  s=$(now_ns); "$BIN" reveal list "$H/src/app" >/dev/null; add reveal-list $(( $(now_ns) - s ))
done
for k in exec-true exec-nosandbox first-exec home-diff reveal-list; do echo "$k ${T[$k]}"; done | python3 -c '
import sys, statistics
rows = {}
for line in sys.stdin:
    k, *v = line.split()
    rows[k] = statistics.median(int(x) for x in v) / 1e6
base = rows["exec-nosandbox"]
print("%-16s%10s%13s" % ("case", "median ms", "x nosandbox"))
for k, m in rows.items():
    print(f"{k:<16}{m:>10.2f}{m / base:>13.2f}")
'
echo "(home of $HOMEFILES files, layer of $LAYERFILES files, $RUNS runs, $(nproc) cores)"
