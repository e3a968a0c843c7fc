#!/usr/bin/env bash
# All the benchmarks in one run, at small sizes (a few minutes on a 2-CPU machine), printed
# as the table of docs/benchmarks.md: what, the command that was run, capsule's figure,
# what it is compared with, the ratio and the target. Each row's command is the one this
# script ran, at this script's sizes; docs/benchmarks.md gives the full-size commands.
# Not a test: run it by hand, on a machine as quiet as you can get (the scripts interleave
# their variants, so load slows them alike, but read the ratios, not the absolutes).
#
# Usage: [BIN=...] [BASE_BIN=...] hack/bench.sh [--all] [NAME...]
#   NAME       run only these: exec open policy refusals proxy landlock seatbelt open-specs
#              work open-repos containerd refused-connect
#              (default: exec open policy refusals proxy)
#   --all      also landlock and seatbelt (they build test and example binaries in the
#              release profile: several minutes of both CPUs the first time),
#              open-specs (only with OPEN_SPECS_OLD_BIN set), work (real workloads:
#              WORK_ROUNDS [2]), open-repos (only with OPEN_REPOS="DIR..." set: checkouts
#              made by `hack/bench-open-repos.sh --fetch`), containerd (as root, with
#              containerd, ctr, umoci, runc and crun installed: CONTAINERD_ROUNDS [5]) and
#              refused-connect (only with BASE_BIN set). Their own tables are printed
#              after this script's, as each script prints them.
#   BIN        the binary measured (default: hack/build-release.sh, which builds it)
#   BASE_BIN   an older binary: its rows beside BIN's in `exec`, for before/after
#   LISTING_BASE_BIN   a binary without refusal listing (this tree built with
#              `listen: false`): `refusals` then also compares listing on vs off
#   OPEN_SPECS_OLD_BIN a binary that runs a spec's steps on the host, for open-specs
# Sizes (environment, defaults in brackets): EXEC_RUNS [30], OPEN_FILES [5000],
# OPEN_RUNS [3], POLICY_FILES [20000], POLICY_RUNS [50], REFUSAL_RUNS [30],
# REFUSAL_BUILDS [3], REFUSAL_FILES [20], PROXY_BYTES [67108864], PROXY_ROUNDS [3],
# PROXY_REQUESTS [200], OPEN_SPECS_ROUNDS [3].
# Each script's whole output is kept in target/bench/<time>/ (said at the end).
# Needs what the scripts need: bwrap, python3, git, make and cc, curl and openssl
# (runc as root, srt on PATH or $SRT for their rows).
set -euo pipefail
cd "$(dirname "$0")/.."

names=()
all=0
for a in "$@"; do
  case "$a" in
    --all) all=1 ;;
    exec | open | policy | refusals | proxy | landlock | seatbelt | open-specs | work | open-repos | containerd | refused-connect) names+=("$a") ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "hack/bench.sh: unknown benchmark '$a' (see --help)" >&2; exit 2 ;;
  esac
done
if [ "${#names[@]}" = 0 ]; then
  names=(exec open policy refusals proxy)
  [ "$all" = 1 ] && names+=(landlock seatbelt open-specs work open-repos containerd refused-connect)
fi
want() { local n; for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }

BIN="${BIN:-$(hack/build-release.sh)}"
BIN=$(realpath "$BIN")
export BIN CAPSULE_BIN="$BIN"
LOG="target/bench/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$LOG"
LOG=$(realpath "$LOG")
load0=$(cut -d' ' -f1 /proc/loadavg)

# run NAME SHOWN-COMMAND CMD...: CMD's stdout and stderr into $LOG/NAME.{out,err}; the
# command as the table shows it into $LOG/NAME.cmd
run() {
  local name=$1 shown=$2 rc=0
  shift 2
  echo "$shown" >"$LOG/$name.cmd"
  echo "hack/bench.sh: $name: $shown" >&2
  local t0=$SECONDS
  "$@" >"$LOG/$name.out" 2>"$LOG/$name.err" || rc=$?
  echo "$rc" >"$LOG/$name.rc"
  if [ "$rc" != 0 ]; then
    echo "hack/bench.sh: $name failed (exit $rc): $(tail -n 1 "$LOG/$name.err")" >&2
  else
    echo "hack/bench.sh: $name done in $((SECONDS - t0)) s" >&2
  fi
}

if want exec; then
  r=${EXEC_RUNS:-30}
  run exec "hack/bench-exec.sh $r" env ${BASE_BIN:+BASE_BIN="$BASE_BIN"} hack/bench-exec.sh "$r"
fi
if want open; then
  f=${OPEN_FILES:-5000} r=${OPEN_RUNS:-3}
  run open "hack/bench-open.sh $f $r" hack/bench-open.sh "$f" "$r"
fi
if want policy; then
  f=${POLICY_FILES:-20000} r=${POLICY_RUNS:-50}
  run policy "RUNS=$r hack/bench-policy.sh $f" env RUNS="$r" hack/bench-policy.sh "$f"
fi
if want refusals; then
  r=${REFUSAL_RUNS:-30} b=${REFUSAL_BUILDS:-3} f=${REFUSAL_FILES:-20}
  run masks "BASE_ENV=CAPSULE_FUSE_MASKS=0 hack/bench-refusals.sh $r $b $f" \
    env -u BASE_BIN BASE_ENV=CAPSULE_FUSE_MASKS=0 hack/bench-refusals.sh "$r" "$b" "$f"
  if [ -n "${LISTING_BASE_BIN:-}" ]; then
    run listing "BASE_BIN=<listing off> hack/bench-refusals.sh $r $b $f" \
      env BASE_BIN="$LISTING_BASE_BIN" hack/bench-refusals.sh "$r" "$b" "$f"
  fi
fi
if want proxy; then
  by=${PROXY_BYTES:-67108864} r=${PROXY_ROUNDS:-3} q=${PROXY_REQUESTS:-200}
  run proxy "BYTES=$by ROUNDS=$r REQUESTS=$q hack/bench-proxy.sh" \
    env BYTES="$by" ROUNDS="$r" REQUESTS="$q" hack/bench-proxy.sh
fi
if want landlock; then
  run landlock "hack/bench-landlock.sh" hack/bench-landlock.sh
fi
if want seatbelt; then
  run seatbelt "hack/bench-seatbelt.sh" hack/bench-seatbelt.sh
fi
if want open-specs && [ -n "${OPEN_SPECS_OLD_BIN:-}" ]; then
  r=${OPEN_SPECS_ROUNDS:-3}
  run open-specs "hack/bench-open-specs.sh OLD_BIN BIN $r" hack/bench-open-specs.sh "$OPEN_SPECS_OLD_BIN" "$BIN" "$r"
fi

if want work; then
  r=${WORK_ROUNDS:-2}
  run work "hack/bench-work.sh $r" env ${BASE_BIN:+BASE_BIN="$BASE_BIN"} hack/bench-work.sh "$r"
fi
if want open-repos && [ -n "${OPEN_REPOS:-}" ]; then
  # shellcheck disable=SC2086 # a list of folders
  run open-repos "hack/bench-open-repos.sh 2 $OPEN_REPOS" hack/bench-open-repos.sh 2 $OPEN_REPOS
fi
if want containerd && [ "$(id -u)" = 0 ] && command -v containerd >/dev/null; then
  r=${CONTAINERD_ROUNDS:-5}
  run containerd "hack/bench-containerd.sh $r" hack/bench-containerd.sh "$r"
fi
if want refused-connect && [ -n "${BASE_BIN:-}" ]; then
  run refused-connect "BASE_BIN=... hack/bench-refused-connect.sh" hack/bench-refused-connect.sh
fi

python3 - "$LOG" "$BIN" "$load0" "$(cut -d' ' -f1 /proc/loadavg)" "$(nproc)" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo ?)" "${names[*]}" <<'EOF'
import os, re, sys
log, bin_, load0, load1, cpus, rev, names = sys.argv[1:8]
names = names.split()

def out(name):
    p = os.path.join(log, name + ".out")
    return open(p).read() if os.path.exists(p) else None
def cmd(name):
    return "`" + open(os.path.join(log, name + ".cmd")).read().strip() + "`"
def failed(name):
    p = os.path.join(log, name + ".rc")
    return os.path.exists(p) and open(p).read().strip() != "0"
def num(pattern, text, group=1):
    m = re.search(pattern, text or "", re.M)
    return float(m.group(group)) if m else None
def f(x, unit="", fmt="{:.2f}"):
    return "n/a" if x is None else fmt.format(x) + unit
def plus(x, unit=" ms"):
    return "n/a" if x is None else f"{x:+.2f}{unit}"
def ratio(a, b):
    return None if a is None or not b else a / b
def target(ok, text):
    return "n/a" if ok is None else (f"{text}: met" if ok else f"{text}: **not met**")

rows = {}  # section -> rows
def row(section, *cells):
    rows.setdefault(section, []).append(cells)
def missing(section, name, why):
    row(section, name, why, "", "", "", "")

S1, S2, S3, S4 = "Starting a command", "Opening capsules, and the gate", "Refusal listing", "Network proxy"

if "exec" in names:
    t = out("exec")
    if t is None or failed("exec"):
        missing(S1, "`exec -- /bin/true`", f"failed: see {log}/exec.err")
    else:
        v = {}
        for m in re.finditer(r"^(\S.*?)\s+([\d.]+|nan)\s+([\d.]+|nan)$", t, re.M):
            v[m.group(1).strip()] = float(m.group(2))
        cap, bw = v.get("capsule exec"), v.get("bwrap, equivalent policy")
        r = ratio(cap, bw)
        others = f"bwrap with the same shape of policy {f(bw, ' ms')}"
        if v.get("/bin/true (bare)") is not None:
            others += f"; bare {f(v['/bin/true (bare)'], ' ms')}"
        if v.get("runc run (bundle, root)") is not None:
            others += f"; runc {f(v['runc run (bundle, root)'], ' ms')}"
        if "BASE capsule exec" in v:
            others += f"; BASE_BIN {f(v['BASE capsule exec'], ' ms')}"
        row(S1, "`exec -- /bin/true`, warm (prepared root, warm spare)", cmd("exec"), f(cap, " ms"), others,
            f(r, " of bwrap"), target(None if r is None else r < 0.85, "< 0.85 of bwrap"))
        h = num(r"^200 hidden paths add: capsule ([-\d.]+) ms", t)
        hb = num(r"^200 hidden paths add: capsule [-\d.]+ ms, bwrap ([-\d.]+) ms", t)
        row(S1, "the same with 200 hidden paths", "same run", plus(h), f"bwrap {plus(hb)}", "",
            target(None if h is None else h < 1.0, "< 1 ms"))
        m = re.search(r"^limits \((.*?)\): ([\d.]+) ms vs ([\d.]+) ms without, add ([-\d.]+) ms", t, re.M)
        if m:
            d = float(m.group(4))
            row(S1, f"the same with `{m.group(1)}`", "same run, a pass of its own", plus(d),
                f"the same exec without limits {m.group(3)} ms", "", target(d < 0.5, "< +0.5 ms"))
        b = v.get("capsule exec, root built per exec")
        row(S1, "`exec -- /bin/true`, root built per exec", "same run (`CAPSULE_PREPARED_IDLE=0`)", f(b, " ms"),
            "bwrap", f(ratio(b, bw), " of bwrap"), "")
        m = re.search(r"^\s+capsule exec\s+([\d.]+)$", t.split("back to back")[-1], re.M) if "back to back" in t else None
        mb = re.search(r"^\s+bwrap, equivalent policy\s+([\d.]+)$", t.split("back to back")[-1], re.M) if "back to back" in t else None
        if m and mb:
            a, c = float(m.group(1)), float(mb.group(1))
            row(S1, "the same, starts back to back", "same run", f(a, " ms per start"), f"bwrap {f(c, ' ms')}",
                f(a / c, " of bwrap"), "")

if "landlock" in names:
    t = out("landlock")
    def dur(s):
        m = re.match(r"([\d.]+)(ns|µs|us|ms|s)$", s)
        if not m: return None
        return float(m.group(1)) * {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1, "s": 1e3}[m.group(2)]
    ll = {int(m.group(1)): dur(m.group(2)) for m in re.finditer(r"landlock build\+fork\+restrict,\s+(\d+) hidden siblings: median (\S+)", t or "")}
    if 0 in ll and 200 in ll and None not in (ll[0], ll[200]):
        row(S1, "Landlock ruleset, 200 hidden siblings", cmd("landlock"), plus(ll[200] - ll[0]), f"0 hidden {f(ll[0], ' ms')}", "", "")
    else:
        missing(S1, "Landlock ruleset, 200 hidden siblings", f"failed: see {log}/landlock.err")
if "seatbelt" in names:
    t = out("seatbelt")
    sp = num(r"^spawn /bin/true: median ([\d.]+) ms", t)
    g = num(r"^generate\+parse\+lint,\s+100 hidden paths: median ([\d.]+) ms", t)
    if g is None:
        missing(S1, "Seatbelt profile, 100 hidden paths", f"failed: see {log}/seatbelt.err")
    else:
        row(S1, "Seatbelt profile, 100 hidden paths (generate, round trip, lint)", cmd("seatbelt"), f(g, " ms"),
            f"spawning `/bin/true` {f(sp, ' ms')}", f(ratio(g, sp)), "")

if "open" in names:
    t = out("open")
    c = num(r"^\s+capsule-open-source\s+([\d.]+) ms", t)
    w = num(r"^\s+git-worktree-add\s+([\d.]+) ms", t)
    cl = num(r"^\s+git-clone-local\s+([\d.]+) ms", t)
    if c is None:
        missing(S2, "`open --source`", f"failed: see {log}/open.err")
    else:
        n = re.search(r"vs git, (\d+) files", t)
        row(S2, f"`open --source` of a {int(n.group(1)):,}-file checkout" if n else "`open --source`", cmd("open"), f(c, " ms", "{:.0f}"),
            f"`git worktree add` {f(w, ' ms', '{:.0f}')}, `git clone --local` {f(cl, ' ms', '{:.0f}')}",
            f(ratio(c, w), " of `git worktree add`"), target(None if w is None else c <= w, "<= 1.0"))
if "open-specs" in names:
    t = out("open-specs")
    m = re.search(r"open of (\d+) specs, median of \d+ rounds: old ([\d.]+) ms, new ([\d.]+) ms, ratio ([\d.]+)", t or "")
    if m:
        r = float(m.group(4))
        row(S2, f"`open` of all {m.group(1)} Kitsoki specs, steps in the build sandbox", cmd("open-specs"),
            f"{float(m.group(3)) / 1000:.2f} s", f"the steps on the host (OPEN_SPECS_OLD_BIN) {float(m.group(2)) / 1000:.2f} s",
            f"{r:.2f}", target(r <= 1.30, "<= 1.30"))
    else:
        missing(S2, "`open` of the Kitsoki specs", "not run: set OPEN_SPECS_OLD_BIN" if t is None else f"failed: see {log}/open-specs.err")
if "policy" in names:
    t = out("policy")
    tt = num(r"^median `true`\s*:\s*([\d.]+) ms", t)
    chk = re.search(r"^median `capsule policy check` \(\s*(\d+) files\):\s*([\d.]+) ms", t or "", re.M)
    own = num(r"^gate's own cost \(check - true\)\s*:\s*([-\d.]+) ms", t)
    sz = num(r"files vs 1000 files\s*:\s*ratio\s*([\d.]+)", t)
    if chk is None:
        missing(S2, "`policy check`", f"failed: see {log}/policy.err")
    else:
        row(S2, f"`policy check` in a {int(chk.group(1)):,}-file repository", cmd("policy"), f(float(chk.group(2)), " ms"),
            f"`true` {f(tt, ' ms')}", f"{plus(own)} of its own; {f(sz)} against a 1,000-file repository",
            target(None if own is None else own < 5, "< 5 ms"))

def refusal_rows(name, what_base):
    t = out(name)
    if t is None or failed(name):
        missing(S3, what_base, f"failed: see {log}/{name}.err")
        return
    on = num(r"^\s+capsule, listing on\s+([\d.]+) ms\s+([\d.]+) of bwrap", t)
    onr = num(r"^\s+capsule, listing on\s+([\d.]+) ms\s+([\d.]+) of bwrap", t, 2)
    d = num(r"^\s+listing costs ([-+\d.]+) ms per exec", t)
    m = re.search(r"^\s+listing on\s+([\d.]+) ms, without\s+([\d.]+) ms: ([-+\d.]+)%", t, re.M)
    row(S3, f"{what_base}: warm `exec -- /bin/true`", cmd(name), f"{f(on, ' ms')} ({plus(d)})",
        "the same without" if name == "masks" else "the same tree with listing off", f(onr, " of bwrap"), "")
    if m:
        p = float(m.group(3))
        row(S3, f"{what_base}: `make -j2` of a generated C project", "same run", f"{p:+.1f}%",
            f"{m.group(2)} ms without", "", target(p <= 3, "<= +3%"))
    for label, key in (("100,000 refused `keyctl`", "100k refused keyctl"), ("100,000 refused writes", "100k refused writes"),
                       ("a lookup storm: 100,000 `stat`s in `~/.ssh`", "100k lookups in ~/.ssh")):
        a = num(r"^\s+" + re.escape(key) + r", listing on\s+([\d.]+) ms", t)
        b = num(r"^\s+" + re.escape(key) + r", BASE\s+([\d.]+) ms", t)
        if a is not None:
            row(S3, f"{what_base}: {label}", "same run", f"{a / 1000:.2f} s", f"{b / 1000:.2f} s without" if b else "", f(ratio(a, b)), "bounded")

if "refusals" in names:
    refusal_rows("masks", "watched masks on vs off")
    if out("listing") is not None:
        refusal_rows("listing", "refusal listing on vs off")

if "proxy" in names:
    t = out("proxy")
    if t is None or failed("proxy"):
        missing(S4, "the allowlist proxy", f"failed: see {log}/proxy.err")
    else:
        m = re.search(r"^\s+plain HTTP\s+direct\s+capsule\s+srt\s+capsule/dir\n\s+(\d+)\s+(\d+)\s+(\S+)\s+([\d.]+)", t, re.M)
        mib = re.search(r"^curl GET of (\d+) MiB", t, re.M)
        size = f"{mib.group(1)} MiB" if mib else ""
        if m:
            srt = m.group(3)
            cmpd = f"direct {m.group(1)} MB/s" + (f"; srt's proxy {srt} MB/s" if srt != "-" else "; srt not found (set SRT)")
            r = float(m.group(2)) / float(srt) if srt != "-" else None
            row(S4, f"plain HTTP download, {size}, curl", cmd("proxy"), f"{m.group(2)} MB/s", cmpd,
                f(r, "x srt") if r else f"{m.group(4)} of direct", target(None if r is None else r >= 3, ">= 3x srt"))
        lat = re.search(r"^\s+median\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", t, re.M)
        srtl = num(r"^\s+srt \(median, p99\)\s+([\d.]+)", t)
        req = re.search(r"(\d+) requests per latency run", t)
        if lat:
            p, rl, d = float(lat.group(2)), float(lat.group(3)), float(lat.group(1))
            row(S4, f"{req.group(1) if req else ''} small requests, a new connection each", "same run",
                f"{p:.0f} us (relay path {rl:.0f} us)", f"direct {d:.0f} us" + (f"; srt {srtl:.0f} us" if srtl else ""),
                f"{srtl / p:.0f}x lower latency than srt" if srtl else f"+{p - d:.0f} us", "")
        cpu = re.search(r"^\s+up\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.n/a]+)\n\s+down\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.n/a]+)", t, re.M)
        if cpu:
            ru, fu, rd, fd = (float(cpu.group(i)) for i in (2, 3, 6, 7))
            if 0 in (ru, fu, rd, fd):
                # CPU time comes in clock ticks (10 ms): too few bytes moved to see it
                row(S4, "proxy CPU per GiB, relay path", "same run", "too few bytes to measure",
                    "a minimal `splice(2)` relay", "", "n/a: set PROXY_BYTES higher (1 GiB)")
            else:
                rr = max(ru / fu, rd / fd)
                row(S4, "proxy CPU per GiB, relay path (worse of up and down)", "same run", f"{max(ru, rd):.2f} CPU-s",
                    f"a minimal `splice(2)` relay {max(fu, fd):.2f}", f"{rr:.2f}", target(rr <= 1.25, "<= 1.25"))
        tls = re.search(r"^\s+HTTPS\s+direct\s+tunnel\s+terminated.*\n\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", t, re.M)
        if tls:
            row(S4, f"HTTPS download, {size}, curl", "same run",
                f"terminated (a secret's host) {tls.group(3)} MB/s; `CONNECT` tunnel {tls.group(2)} MB/s",
                f"direct {tls.group(1)} MB/s", f"{tls.group(5)} / {tls.group(4)}", "")
        tp = re.search(r"^\s+up \(client->server\)\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+([\d.]+)\n\s+down \(server->client\)\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+([\d.]+)", t, re.M)
        if tp:
            a, b = float(tp.group(1)), float(tp.group(2))
            row(S4, f"throughput through the relay path, {size}", "same run", f"{min(a, b):.2f}-{max(a, b):.2f} of direct",
                "direct loopback", "", target(min(a, b) >= 0.8, ">= 0.8"))

print(f"capsule benchmarks: {bin_} (tree {rev}), {cpus} CPUs, load {load0} at the start and {load1} at the end")
print(f"small sizes: read the ratios, not the absolutes; full output in {log}/")
for section in (S1, S2, S3, S4):
    if section not in rows:
        continue
    print(f"\n## {section}\n")
    print("| what | command | capsule | compared with | ratio | target |")
    print("|---|---|---|---|---|---|")
    for cells in rows[section]:
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
EOF
# the scripts that print tables of their own: as they printed them
for n in work open-repos containerd refused-connect; do
  [ -f "$LOG/$n.out" ] || continue
  printf '\n## %s (`%s`)\n\n```\n' "$n" "$(cat "$LOG/$n.cmd")"
  cat "$LOG/$n.out"
  printf '```\n'
done
