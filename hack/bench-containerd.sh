#!/bin/bash
# Start-to-exit time of `ctr run --rm IMAGE ID true` under capsule-runc, runc and crun,
# through Debian's containerd and its io.containerd.runc.v2 shim: a containerd of this
# script's own on /dev/shm, a busybox image made with umoci, the runtimes interleaved
# round by round; medians and ratios to crun and runc. Root only.
#
#   hack/bench-containerd.sh [ROUNDS]        (default 30)
#
# CAPSULE_BIN: the capsule binary (default target/release/capsule, else target/debug).
# crun 1.8 refuses hybrid cgroup hosts (v1 with a v2 mount); there it runs in a mount
# namespace without the v2 mount (the wrapper costs a fork and an unshare: reported as
# such). The machine may be shared: compare the ratios of one run.
set -eu
rounds=${1:-30}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${CAPSULE_BIN:-$repo/target/release/capsule}
[ -x "$bin" ] || bin=$repo/target/debug/capsule
d=/dev/shm/capsule-bench-ctd-$$
mkdir -p "$d"
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; sleep 0.5; grep " $d" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r umount -l; rm -rf "$d"; }
trap cleanup EXIT
cat > "$d/config.toml" <<C
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$d/c.sock"
[ttrpc]
  address = "$d/c.sock.ttrpc"
[metrics]
  address = ""
C
containerd --config "$d/config.toml" > "$d/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$d/c.sock" ] && break; sleep 0.1; done
ln -s "$bin" "$d/capsule-runc"
printf '#!/bin/sh\nexec unshare -m sh -c '\''umount /sys/fs/cgroup/unified 2>/dev/null; exec crun "$@"'\'' crun "$@"\n' > "$d/crun-hybrid"
chmod +x "$d/crun-hybrid"
crun_bin=$(command -v crun)
if ! crun --version >/dev/null 2>&1 || grep -q " /sys/fs/cgroup/unified " /proc/self/mountinfo; then crun_bin=$d/crun-hybrid; fi
(cd "$d" && umoci init --layout img >/dev/null && umoci new --image img:1 && umoci unpack --image img:1 b >/dev/null \
  && mkdir -p b/rootfs/bin && cp /bin/busybox b/rootfs/bin/ && ln -s busybox b/rootfs/bin/true && ln -s busybox b/rootfs/bin/sh \
  && umoci repack --image img:1 b && (cd img && tar cf ../img.tar .)) >/dev/null
ctr -a "$d/c.sock" image import --index-name bench/bb:1 "$d/img.tar" >/dev/null
# capsule-runc without its refusal observer (CAPSULE_OCI_OBSERVE=0), through a shell
# wrapper, as crun-hybrid is: what the observer costs is capsule's row against this one
# less the wrapper's fork and exec of sh (about a millisecond)
printf '#!/bin/sh\nCAPSULE_OCI_OBSERVE=0 exec %s "$@"\n' "$d/capsule-runc" > "$d/capsule-noobserve"
chmod +x "$d/capsule-noobserve"
declare -A t
names=(capsule capsule-noobserve runc crun)
declare -A rt=([capsule]=$d/capsule-runc [capsule-noobserve]=$d/capsule-noobserve [runc]=$(command -v runc) [crun]=$crun_bin)
ms() { date +%s%N; }
for i in $(seq "$rounds"); do
  for n in "${names[@]}"; do
    a=$(ms)
    ctr -a "$d/c.sock" run --rm --runc-binary "${rt[$n]}" bench/bb:1 "b-$n-$i" true
    b=$(ms)
    t[$n]+="$(( (b - a) / 1000 )) "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "ctr run --rm IMAGE ID true, $rounds rounds interleaved ($(nproc) CPUs, $(uname -r)); crun as: $crun_bin"
declare -A m
for n in "${names[@]}"; do m[$n]=$(echo "${t[$n]}" | median); done
printf '%-18s %10s %12s %12s\n' runtime 'median ms' 'vs crun' 'vs runc'
for n in "${names[@]}"; do
  printf '%-18s %10.1f %12.2f %12.2f\n' "$n" "$(echo "${m[$n]}/1000" | bc -l)" "$(echo "${m[$n]}/${m[crun]}" | bc -l)" "$(echo "${m[$n]}/${m[runc]}" | bc -l)"
done
