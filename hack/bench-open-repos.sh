#!/usr/bin/env bash
# Benchmark: `capsule open --source` of real checkouts with history, first and later
# opens, side by side with `git worktree add --detach` and `git clone --local` of the
# same commit, for one or two capsule binaries. Each round runs every command once per
# repository, in an order that rotates from round to round (load drift on a shared
# machine hits all alike); reports medians and ratios.
#
#   first   a fresh capsule root (empty object cache): the whole history is walked,
#           verified and copied
#   later   the same root again (the object cache has the commit)
#
# Targets (per repository): first <= 2.0x and later <= 1.0x `git worktree add`.
#
# Usage: hack/bench-open-repos.sh [RUNS] REPO...
#   REPO          a checkout (its HEAD is opened); e.g. /var/tmp/open-bench/{tokio,cargo,gen100k}
#   CAPSULE_BIN   binary to measure (default: target/release/capsule)
#   BASE_BIN      a second binary measured alike (optional), e.g. /work/bins/capsule-final
#   BENCH_DIR     scratch folder for capsule roots, workspaces, worktrees and clones
#                 (default: a new folder in /dev/shm). Keep REPO on the same filesystem
#                 so that `git clone --local` hardlinks. On ext4, creating files within a
#                 minute of deleting many is several times slower (the allocator skips
#                 recently deleted inodes, `recently_deleted()`), which a benchmark that
#                 removes each workspace before the next one hits all the time: copy the
#                 repositories to tmpfs (`cp -a`) and keep BENCH_DIR there.
# Repositories: hack/bench-open-repos.sh --fetch DIR makes DIR/{tokio,cargo} from the
# bare mirrors in /work/.mirror (or clones them from GitHub) and DIR/gen100k (100k files,
# 10k commits) from hack/gen-history.py.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid

if [ "${1:-}" = --fetch ]; then
  D=${2:?usage: hack/bench-open-repos.sh --fetch DIR}
  mkdir -p "$D"
  for r in tokio-rs/tokio rust-lang/cargo; do
    n=${r#*/}
    [ -d "$D/$n" ] && continue
    m=/work/.mirror/${r/\//+}/repo
    if [ -d "$m" ]; then git clone -q "$m" "$D/$n"; else git clone -q "https://github.com/$r" "$D/$n"; fi
  done
  if [ ! -d "$D/gen100k" ]; then
    git init -q -b main "$D/gen100k"
    python3 "$HERE/hack/gen-history.py" | git -C "$D/gen100k" fast-import --quiet
    git -C "$D/gen100k" reset -q --hard main
    git -C "$D/gen100k" repack -adq
  fi
  exit 0
fi

RUNS=7
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then RUNS=$1; shift; fi
[ $# -gt 0 ] || { echo "usage: hack/bench-open-repos.sh [RUNS] REPO..." >&2; exit 2; }
BIN=${CAPSULE_BIN:-$HERE/target/release/capsule}
[ -x "$BIN" ] || { echo "$BIN: not built (hack/build-release.sh)" >&2; exit 2; }
BASE_BIN=${BASE_BIN:-}
REPOS=()
for r in "$@"; do REPOS+=("$(cd "$r" && pwd)"); done
WORK=${BENCH_DIR:-$(mktemp -d /dev/shm/bench-open-repos.XXXXXX)}
mkdir -p "$WORK"
cleanup() {
  for r in "${REPOS[@]}"; do git -C "$r" worktree prune 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s%N; }
# run one measured command; prints its wall time in microseconds
timed() { local s e; s=$(now); "$@" >/dev/null 2>"$WORK/err" || { echo "failed: $*" >&2; cat "$WORK/err" >&2; exit 1; }; e=$(now); echo $(((e - s) / 1000)); }

# one measurement of $1 (a command name) on repository $2; prints microseconds
measure() {
  local what=$1 repo=$2 out=$WORK/o t
  rm -rf "$out"; mkdir -p "$out"
  case $what in
    worktree) t=$(timed git -C "$repo" worktree add -q --detach "$out/w"); git -C "$repo" worktree remove --force "$out/w" ;;
    clone-local) t=$(timed git clone -q --local "$repo" "$out/c") ;;
    *-first|*-later)
      local bin=$BIN root=$WORK/root-new
      case $what in base-*) bin=$BASE_BIN root=$WORK/root-base ;; esac
      # a later open needs the cache of an earlier one: made here, not timed
      if [ "${what#*-}" = first ]; then
        rm -rf "$root"
      elif [ ! -d "$root" ]; then
        CAPSULE_ROOT=$root "$bin" open --source "$repo" --name warm --dest "$out/warm" --json >/dev/null
      fi
      t=$(CAPSULE_ROOT=$root timed "$bin" open --source "$repo" --name m$RANDOM$RANDOM --dest "$out/m" --json)
      # the capsule is dropped by hand (its bundle), keeping the object cache
      rm -rf "$root/bundles" "$root/workspaces" "$out/warm"
      ;;
  esac
  rm -rf "$out"
  echo "$t"
}

NAMES=(new-first new-later worktree clone-local)
[ -n "$BASE_BIN" ] && NAMES+=(base-first base-later)
RAW=$WORK/raw.txt
: >"$RAW"
for repo in "${REPOS[@]}"; do
  n=$(basename "$repo")
  echo "$n: $(git -C "$repo" rev-list --count HEAD) commits, $(git -C "$repo" ls-files | wc -l) files, $(du -sh "$repo/.git/objects" | cut -f1) objects" >&2
  for round in $(seq 0 "$RUNS"); do # round 0 is a warm-up (page cache)
    k=${#NAMES[@]}
    for i in $(seq 0 $((k - 1))); do
      what=${NAMES[$(((i + round) % k))]}
      t=$(measure "$what" "$repo")
      [ "$round" = 0 ] || echo "$n $what $t" >>"$RAW"
    done
    [ "$round" = 0 ] || echo "  round $round: $(grep "^$n " "$RAW" | tail -n "$k" | awk '{printf "%s %.0f  ", $2, $3/1000}')" >&2
  done
done

echo
echo "capsule open --source vs git, median of $RUNS interleaved runs (ms); $BIN${BASE_BIN:+ vs base $BASE_BIN}"
python3 - "$RAW" "${NAMES[@]}" <<'PY'
import sys, statistics
raw, names = sys.argv[1], sys.argv[2:]
d = {}
for l in open(raw):
    r, w, t = l.split()
    d.setdefault(r, {}).setdefault(w, []).append(int(t) / 1000)
for r, m in d.items():
    med = {w: statistics.median(v) for w, v in m.items()}
    wt = med["worktree"]
    print(f"{r}:")
    for w in names:
        line = f"  {w:<12} {med[w]:8.1f} ms  {med[w] / wt:5.2f}x worktree"
        if w.startswith("new-") and "base-" + w[4:] in med:
            line += f"  {med[w] / med['base-' + w[4:]]:5.2f}x base"
        print(line)
    f, l = med["new-first"] / wt, med["new-later"] / wt
    print(f"  targets: first {f:.2f}x <= 2.0 {'met' if f <= 2.0 else 'NOT met'}; later {l:.2f}x <= 1.0 {'met' if l <= 1.0 else 'NOT met'}")
PY
