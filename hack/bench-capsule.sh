# Sourced by the exec benchmarks (hack/bench-exec.sh, hack/bench-snapshot.sh): a scratch
# capsule to start commands in, and bwrap with the same shape of policy. Expects BIN (and
# optionally BASE_BIN) and the benchmark's name in $1; sets W (a scratch directory on
# /dev/shm, removed on exit), BIN and BASE_BIN (copies in W), CAPSULE_ROOT and HOME (in W),
# WS (the capsule's workspace, named `bench`), TMPD (its /tmp) and the BWRAP array.

W="$(mktemp -d "/dev/shm/bench-$1-XXXXXX")"
trap 'rm -rf "$W"' EXIT
# measure copies: a freshly linked binary in target/ starts measurably slower (~1.5 ms
# here) than the same bytes copied, which would skew before/after comparisons
cp "$BIN" "$W/capsule" && BIN="$W/capsule"
if [ -n "${BASE_BIN:-}" ]; then cp "$BASE_BIN" "$W/capsule-base" && BASE_BIN="$W/capsule-base"; fi
export CAPSULE_ROOT="$W/root" HOME="$W/home"
mkdir -p "$HOME/.ssh" "$W/src"
echo secret >"$HOME/.ssh/id_rsa"
git -C "$W/src" init -q
echo hi >"$W/src/README"
git -C "$W/src" -c user.name=b -c user.email=b@example.invalid add -A
git -C "$W/src" -c user.name=b -c user.email=b@example.invalid commit -qm init
"$BIN" open --source "$W/src" --name bench >/dev/null
WS="$(cd "$CAPSULE_ROOT/workspaces/bench" && pwd -P)"
TMPD="$CAPSULE_ROOT/bundles/bench/tmp"

# bwrap with the same shape of policy: new user/pid/net/ipc/uts namespaces, read-only
# system dirs and home, credentials masked, workspace rw, capsule tmp at /tmp, minimal
# /dev, fresh /proc, clean env, no capabilities, dies with its parent.
BWRAP=(bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts
  --die-with-parent --new-session --cap-drop ALL --clearenv --setenv PATH /usr/bin:/bin
  --setenv TMPDIR /tmp --ro-bind /usr /usr --ro-bind /etc /etc --ro-bind /opt /opt
  --ro-bind /var /var --ro-bind /home /home --ro-bind "$HOME" "$HOME")
for l in bin sbin lib lib64; do
  if [ -L "/$l" ]; then BWRAP+=(--symlink "$(readlink "/$l")" "/$l"); elif [ -d "/$l" ]; then BWRAP+=(--ro-bind "/$l" "/$l"); fi
done
BWRAP+=(--tmpfs "$HOME/.ssh" --dev /dev --proc /proc --bind "$TMPD" /tmp
  --bind "$WS" "$WS" --ro-bind "$WS/capsule-manifest.json" "$WS/capsule-manifest.json"
  --chdir "$WS")
