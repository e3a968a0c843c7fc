#!/usr/bin/env bash
# Benchmark: what listing refusals costs `capsule exec` (seccomp user notification of the
# refused syscalls, write calls and connects; see runtime/src/linux/notify.rs).
#
#   1. warm `exec -- /bin/true`: this binary (listing on) vs BASE_BIN (a binary without
#      listing, e.g. main's), interleaved, and bwrap for the ratio;
#   2. a real small build: `make -j2` of a generated C project (N files, headers, one
#      library, objects and a link), from clean each round, inside the capsule, this
#      binary vs BASE_BIN, interleaved;
#   3. a refusal storm: 100,000 refused `keyctl` calls, and 100,000 refused writes
#      (`open("/etc/x", O_WRONLY)`), this binary vs BASE_BIN.
#
# The fair BASE is this same tree with listing turned off and nothing else changed: build
# it with `listen: false` in `SeccompProgram::build_for` (runtime/src/kernel/seccomp.rs;
# the plain filter then answers EPERM itself and no notification is sent) and copy the
# binary aside. An older binary as BASE also differs in every other feature since.
#
# The reads of the home's credentials are listed by watched masks (runtime/src/linux/
# fusemask.rs), which cost nothing per open: for them the fair BASE is the same binary
# with them off, `BASE_ENV=CAPSULE_FUSE_MASKS=0` (BASE_BIN then defaults to BIN; the
# scratch home holds ~/.ssh, watched where FUSE can be used: as root here). A fourth part
# then stores a lookup storm: 100,000 stats of names in ~/.ssh.
#
# Prints medians and ratios. Not a test: run by hand,
#   BASE_BIN=/path/to/capsule-without-listing hack/bench-refusals.sh [RUNS] [BUILDS] [FILES]
#   BASE_ENV=CAPSULE_FUSE_MASKS=0 hack/bench-refusals.sh [RUNS] [BUILDS] [FILES]
# BIN defaults to the release build (hack/build-release.sh); BIN=target/debug/capsule
# compares debug builds. Needs bubblewrap, make and cc.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-300}"
BUILDS="${2:-7}"
FILES="${3:-60}"
BIN="${BIN:-$(hack/build-release.sh)}"
BASE_ENV="${BASE_ENV:-}"
if [ -n "$BASE_ENV" ]; then BASE_BIN="${BASE_BIN:-$BIN}"; fi
: "${BASE_BIN:?set BASE_BIN to a capsule binary without refusal listing, e.g. one built from main, or BASE_ENV}"
command -v bwrap >/dev/null || { echo "bwrap missing: apt-get install -y bubblewrap" >&2; exit 1; }

# shellcheck source=hack/bench-capsule.sh
. hack/bench-capsule.sh refusals

# the C project: FILES sources with a shared header, a static library of half of them
P="$WS/proj"
mkdir -p "$P/src" "$P/include"
python3 - "$P" "$FILES" <<'EOF'
import sys
p, n = sys.argv[1], int(sys.argv[2])
with open(f"{p}/include/common.h", "w") as h:
    h.write("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n")
    for i in range(n):
        h.write(f"int f{i}(int);\n")
for i in range(n):
    with open(f"{p}/src/f{i}.c", "w") as c:
        c.write('#include "common.h"\n')
        c.write(f"int f{i}(int x) {{ char b[64]; snprintf(b, sizeof b, \"%d\", x * {i}); return (int)strlen(b) + x; }}\n")
with open(f"{p}/src/main.c", "w") as c:
    c.write('#include "common.h"\nint main(void) { int s = 0;\n')
    for i in range(n):
        c.write(f" s += f{i}({i});\n")
    c.write(' printf("%d\\n", s); return 0; }\n')
half = n // 2
lib = " ".join(f"obj/f{i}.o" for i in range(half))
rest = " ".join(f"obj/f{i}.o" for i in range(half, n))
with open(f"{p}/Makefile", "w") as m:
    m.write("CFLAGS=-O1 -Iinclude\nall: prog\n")
    m.write(f"obj/%.o: src/%.c include/common.h\n\t@mkdir -p obj\n\t$(CC) $(CFLAGS) -c -o $@ $<\n")
    m.write(f"libf.a: {lib}\n\tar rcs $@ $^\n")
    m.write(f"prog: obj/main.o {rest} libf.a\n\t$(CC) -o $@ $^\n\t./prog > out.txt\n")
    m.write("clean:\n\trm -rf obj libf.a prog out.txt\n")
EOF

python3 - "$RUNS" "$BUILDS" "$BIN" "$BASE_BIN" "$WS" "${BWRAP[*]}" "$BASE_ENV" "$HOME" <<'EOF'
import os, random, shlex, statistics, subprocess, sys, time
runs, builds, new, base, ws = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
bwrap = shlex.split(sys.argv[6])
env = dict(os.environ)
base_env = dict(env)
for kv in sys.argv[7].split():
    k, v = kv.split("=", 1)
    base_env[k] = v
home = sys.argv[8]
def run(argv, cwd=ws):
    s = time.perf_counter()
    e = base_env if argv[0] == base else env
    subprocess.run(argv, cwd=cwd, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - s) * 1000
def rounds(variants, n, warm):
    rng = random.Random(7)
    times = {name: [] for name, _ in variants}
    for r in range(warm + n):
        order = list(variants)
        rng.shuffle(order)
        for name, argv in order:
            t = run(argv())
            if r >= warm:
                times[name].append(t)
    return {name: statistics.median(v) for name, v in times.items()}

true = [
    ("bwrap", lambda: bwrap + ["/bin/true"]),
    ("capsule, listing on", lambda: [new, "exec", "bench", "--", "/bin/true"]),
    ("capsule, BASE (no listing)", lambda: [base, "exec", "bench", "--", "/bin/true"]),
]
m = rounds(true, runs, max(5, runs // 20))
print(f"warm exec -- /bin/true, {runs} interleaved rounds (medians):")
for name, _ in true:
    print(f"  {name:30} {m[name]:8.2f} ms  {m[name] / m['bwrap']:5.2f} of bwrap")
print(f"  listing costs {m['capsule, listing on'] - m['capsule, BASE (no listing)']:+.2f} ms per exec\n")

build = "make -s clean && make -s -j2"
mk = [
    ("make -j2, listing on", lambda: [new, "exec", "bench", "--quiet-refusals", "--", "sh", "-c", "cd proj && " + build]),
    ("make -j2, BASE (no listing)", lambda: [base, "exec", "bench", "--", "sh", "-c", "cd proj && " + build]),
]
m = rounds(mk, builds, 1)
on, off = m["make -j2, listing on"], m["make -j2, BASE (no listing)"]
print(f"build of a generated C project, {builds} interleaved rounds (medians):")
print(f"  listing on {on:8.1f} ms, without {off:8.1f} ms: {100 * (on / off - 1):+.2f}%\n")

storm = "import ctypes\nf=ctypes.CDLL(None).syscall\nfor i in range(100000): f(250,0,0,0,0,0)"
wstorm = "import os\nfor i in range(100000):\n try: os.open('/etc/x', os.O_WRONLY)\n except OSError: pass"
st = [
    ("100k refused keyctl, listing on", lambda: [new, "exec", "bench", "--quiet-refusals", "--", "python3", "-c", storm]),
    ("100k refused keyctl, BASE", lambda: [base, "exec", "bench", "--", "python3", "-c", storm]),
    ("100k refused writes, listing on", lambda: [new, "exec", "bench", "--quiet-refusals", "--", "python3", "-c", wstorm]),
    ("100k refused writes, BASE", lambda: [base, "exec", "bench", "--", "python3", "-c", wstorm]),
]
m = rounds(st, 3, 0)
print("refusal storms, 3 interleaved rounds (medians):")
for name, _ in st:
    print(f"  {name:34} {m[name]:9.1f} ms")
if sys.argv[7]:
    lstorm = f"import os\nfor i in range(100000):\n try: os.stat('{home}/.ssh/k%d' % (i % 1000))\n except OSError: pass"
    ls = [
        ("100k lookups in ~/.ssh, listing on", lambda: [new, "exec", "bench", "--quiet-refusals", "--", "python3", "-c", lstorm]),
        ("100k lookups in ~/.ssh, BASE", lambda: [base, "exec", "bench", "--", "python3", "-c", lstorm]),
    ]
    m = rounds(ls, 3, 0)
    for name, _ in ls:
        print(f"  {name:34} {m[name]:9.1f} ms")
EOF
