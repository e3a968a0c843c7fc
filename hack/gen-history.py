#!/usr/bin/env python3
# A `git fast-import` stream of a generated history: 100,000 files in one first commit, then
# 9,999 commits that each change 3 files (seeded: the same repository every time).
# Used by hack/bench-open-repos.sh --fetch: python3 hack/gen-history.py | git fast-import
import sys, random
random.seed(29)
N, C = 100_000, 10_000
out = sys.stdout.buffer
def path(i): return f"d{i//1000:03d}/e{(i//100)%10}/f{i:06d}.txt"
def content(i, v): return (f"file {i} version {v}\n" + ("line %d of file %d\n" % (i % 37, i)) * (1 + i % 12)).encode()
t = 1700000000
def commit(n, files):
    global t
    t += 60
    msg = f"commit {n}\n".encode()
    out.write(b"commit refs/heads/main\n")
    out.write(f"committer Bench <bench@example.invalid> {t} +0000\n".encode())
    out.write(b"data %d\n%s" % (len(msg), msg))
    for p, data in files:
        out.write(b"M 644 inline %s\ndata %d\n%s\n" % (p.encode(), len(data), data))
versions = {}
commit(0, [(path(i), content(i, 0)) for i in range(N)])
for n in range(1, C):
    files = []
    for _ in range(3):
        i = random.randrange(N)
        versions[i] = versions.get(i, 0) + 1
        files.append((path(i), content(i, versions[i])))
    commit(n, files)
