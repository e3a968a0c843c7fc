#!/usr/bin/env bash
# Make a generated git repository for the benchmarks: FILES small text files spread over
# 100 folders (d00/ .. d99/, file i in folder i % 100), in 3 commits, checked out.
#
#   commit 1  adds every file
#   commit 2  changes every 97th file (about 1%)
#   commit 3  changes every 89th file, offset by 7
#
# Deterministic: the same FILES gives the same commit id on every machine (fixed names,
# contents, author and dates; printed at the end). Fast: one pack written whole (no
# per-file `git add`), then one checkout (`git reset --hard`, which writes the work tree
# and the index). About 1 minute for 1,000,000 files on an ext4 disk; those
# take ~4.5 GB there (one 4 KiB block and one inode per file: check `df -h` first).
#
# The repository is made in DIR.gen-tmp and renamed to DIR when complete, so an
# interrupted run leaves no half-made DIR. A DIR already made by this script with the same
# FILES is kept as it is (shared read-only by several benchmarks: e.g.
# /var/tmp/capsule-scratch/repos/gen1m); any other existing DIR is refused.
#
# Usage: hack/gen-repo.sh DIR FILES     e.g. hack/gen-repo.sh /var/tmp/capsule-scratch/repos/gen100k 100000
set -euo pipefail
[ $# -eq 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "usage: hack/gen-repo.sh DIR FILES" >&2; exit 2; }
DIR=${1%/} FILES=$2
# nothing of the host's git configuration or identity enters the repository
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
marker="gen-repo.sh files=$FILES folders=100 commits=3 v1"
if [ -e "$DIR" ]; then
  if [ "$(cat "$DIR/.git/gen-repo" 2>/dev/null)" = "$marker" ]; then
    echo "$DIR: already made ($marker), HEAD $(git -C "$DIR" rev-parse HEAD)"
    exit 0
  fi
  echo "$DIR: exists and was not made by hack/gen-repo.sh with $FILES files; remove it or pick another folder" >&2
  exit 1
fi
tmp=$DIR.gen-tmp
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$DIR")"
git init -q -b main "$tmp"
git -C "$tmp" config gc.auto 0
git -C "$tmp" config checkout.workers 0 # one worker per CPU for the checkout

# The objects are written by this script as one pack (no deltas) and indexed by
# `git index-pack`: `git fast-import` looks up each path in its folder linearly, which at
# 10,000 files per folder is quadratic (minutes for 1M files).
python3 - "$FILES" "$tmp/.git/gen.pack" <<'PY' >"$tmp/.git/gen-head"
import sys, hashlib, zlib
n, pack_path = int(sys.argv[1]), sys.argv[2]
TYPES = {b"commit": 1, b"tree": 2, b"blob": 3}
chunks, seen = [], set()
def put(kind, data):
    """adds one object to the pack (once); returns its binary id"""
    oid = hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).digest()
    if oid in seen:
        return oid
    seen.add(oid)
    size, t = len(data), TYPES[kind]
    hdr = bytearray([(t << 4) | (size & 15)])
    size >>= 4
    while size:
        hdr[-1] |= 0x80
        hdr.append(size & 0x7F)
        size >>= 7
    chunks.append(bytes(hdr) + zlib.compress(data, 1))
    return oid
def content(i, v):
    # 40 to ~500 bytes, different for every file and version
    head = b"file %d version %d\n" % (i, v)
    return head + b"line %d of file %d: generated for the capsule benchmarks\n" % (i % 31, i) * (i % 9)
folders = [dict() for _ in range(100)]  # folder -> {name: blob id}
def commit(k, changed, parent):
    for i, v in changed:
        folders[i % 100][b"f%07d.txt" % i] = put(b"blob", content(i, v))
    root = b""
    for d in range(100):
        if folders[d]:
            tree = b"".join(b"100644 %s\0%s" % (name, oid) for name, oid in sorted(folders[d].items()))
            root += b"40000 d%02d\0%s" % (d, put(b"tree", tree))
    who = b"Gen Repo <gen-repo@example.invalid> %d +0000" % (1700000000 + k * 3600)
    body = b"tree %s\n" % put(b"tree", root).hex().encode()
    if parent:
        body += b"parent %s\n" % parent.hex().encode()
    body += b"author %s\ncommitter %s\n\ngenerated commit %d\n" % (who, who, k)
    return put(b"commit", body)
c = commit(1, ((i, 1) for i in range(n)), None)
c = commit(2, ((i, 2) for i in range(0, n, 97)), c)
c = commit(3, ((i, 3) for i in range(7, n, 89)), c)
h = hashlib.sha1()
with open(pack_path, "wb") as f:
    for b in [b"PACK" + (2).to_bytes(4, "big") + len(chunks).to_bytes(4, "big")] + chunks:
        h.update(b)
        f.write(b)
    f.write(h.digest())
print(c.hex())
PY
git -C "$tmp" index-pack --stdin <"$tmp/.git/gen.pack" >/dev/null
git -C "$tmp" update-ref refs/heads/main "$(cat "$tmp/.git/gen-head")"
rm "$tmp/.git/gen-head" "$tmp/.git/gen.pack"

git -C "$tmp" reset -q --hard main
echo "$marker" >"$tmp/.git/gen-repo"
mv "$tmp" "$DIR"
trap - EXIT
echo "$DIR: $FILES files, HEAD $(git -C "$DIR" rev-parse HEAD)"
