#!/usr/bin/env bash
# capsule-runc beside runc under the container engines: each engine started here with its
# own data root, daemon and socket (a network namespace of its own), a busybox image made
# locally (no registry), the same operations run under each runtime, one table printed.
#
#   hack/engines.sh [ENGINE...]            the matrix (engines: docker podman rootless cri)
#   hack/engines.sh --bench N [ENGINE...]  start times instead: N runs of each, interleaved,
#                                          medians and ratios (capsule-runc, runc, crun)
#
# As root. CAPSULE_BIN: the capsule binary (default: target/release/capsule, else
# target/debug/capsule); RUNTIMES: the runtimes of the matrix (default "capsule runc").
# Scratch: /var/tmp/capsule-engines-$$ (removed at the end). Needs docker.io, podman,
# (rootless: the user capsule-ci with subordinate ids), cri: containerd and crictl on PATH
# (crictl: cri-tools, not packaged by Debian 12; see docs/oci.md).
set -uo pipefail
cd "$(dirname "$0")/.."
BENCH=0
if [ "${1:-}" = --bench ]; then BENCH=$2; shift 2; fi
ENGINES=${*:-docker podman rootless cri}
BIN=${CAPSULE_BIN:-}
[ -n "$BIN" ] || { [ -x target/release/capsule ] && BIN=$PWD/target/release/capsule || BIN=$PWD/target/debug/capsule; }
RUNTIMES=${RUNTIMES:-capsule runc}
[ "$BENCH" -gt 0 ] && RUNTIMES="capsule runc crun"
S=/var/tmp/capsule-engines-$$
mkdir -p "$S" && chmod 755 "$S"
ln -s "$BIN" "$S/capsule-runc"
I=capsule.test/busybox:1
NS=capsule-engines-$$
PIDS=()
cleanup() {
  for c in $(dk ps -aq 2>/dev/null); do dk rm -f "$c" >/dev/null 2>&1; done
  pm_root rm -af -t 0 >/dev/null 2>&1
  pm_rootless rm -af -t 0 >/dev/null 2>&1
  [ -n "${CRICTL_OK:-}" ] && { cr rmp -fa >/dev/null 2>&1; }
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 2
  ip netns delete "$NS" 2>/dev/null
  grep -o " $S[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  rm -rf "$S"
}
[ -n "${KEEP:-}" ] || trap cleanup EXIT

path_of() { case $1 in capsule) echo "$S/capsule-runc" ;; runc) command -v runc ;; crun) command -v crun ;; esac; }

# ---- the image: busybox-static, every applet, /etc/passwd with root and app (1000)
r=$S/rootfs
mkdir -p "$r"/{bin,etc,root,home/app,tmp,proc,sys,dev,run}
cp /bin/busybox "$r/bin/"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n' >"$r/etc/passwd"
printf 'root:x:0:\napp:x:1000:\n' >"$r/etc/group"
echo kept >"$r/run/from-image"
chown 1000:1000 "$r/home/app"; chmod 1777 "$r/tmp"
tar -C "$r" -cf "$S/busybox.tar" .
mkdir -p "$S/bind" && echo from-host >"$S/bind/host" && chmod 777 "$S/bind" && chmod 1777 "$S"
ip netns add "$NS" && ip netns exec "$NS" ip link set lo up

# ---- the engines
dk() { DOCKER_HOST=unix://$S/docker/docker.sock /usr/bin/docker "$@"; }
start_docker() {
  mkdir -p "$S/docker"
  local rt=""
  # (runc is Docker's own runtime name: the runc on PATH)
  for x in capsule crun; do rt="$rt --add-runtime $x=$(path_of $x)"; done
  nsenter --net=/run/netns/$NS dockerd --data-root "$S/docker/data" --exec-root "$S/docker/exec" \
    --host "unix://$S/docker/docker.sock" --pidfile "$S/docker/pid" $rt --storage-driver overlay2 \
    --log-level warn >"$S/docker/log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 300); do dk version >/dev/null 2>&1 && break; sleep 0.2; done
  dk import "$S/busybox.tar" $I >/dev/null
}
# rlimits: Podman asks 1048576 open files; raising a hard limit needs CAP_SYS_RESOURCE
printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=32768:32768"]\n[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n' \
  "$(ulimit -Hn)" "$(ulimit -Hn)" >"$S/containers.conf"
chmod 644 "$S/containers.conf"
RT=capsule
pm_root() { CONTAINERS_CONF=$S/containers.conf nsenter --net=/run/netns/$NS podman --root "$S/podman/root" --runroot "$S/podman/run" --runtime "$(path_of $RT)" "$@"; }
pm_rootless() {
  runuser -u capsule-ci -- env XDG_RUNTIME_DIR="$S/rl/xdg" HOME="$S/rl" CONTAINERS_CONF="$S/containers.conf" \
    podman --root "$S/rl/root" --runroot "$S/rl/xdg/run" --runtime "$(path_of $RT)" "$@"
}
start_podman() { pm_root import -q "$S/busybox.tar" $I >/dev/null; }
start_rootless() {
  mkdir -p "$S/rl/xdg" && cp "$S/busybox.tar" "$S/rl/" && chown -R capsule-ci "$S/rl" && chmod 700 "$S/rl" "$S/rl/xdg"
  pm_rootless import -q "$S/rl/busybox.tar" $I >/dev/null
}
cr() { nsenter --net=/run/netns/$NS crictl --runtime-endpoint "unix://$S/cri/sock" --image-endpoint "unix://$S/cri/sock" "$@"; }
start_cri() {
  command -v crictl >/dev/null || { echo "crictl not found: the cri column is skipped (install cri-tools, docs/oci.md)" >&2; return 1; }
  mkdir -p "$S/cri"
  cat >"$S/cri/config.toml" <<EOF
version = 2
root = "$S/cri/root"
state = "$S/cri/state"
[grpc]
  address = "$S/cri/sock"
[ttrpc]
  address = "$S/cri/sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$I"
  restrict_oom_score_adj = true
  enable_cdi = false
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  snapshotter = "overlayfs"
EOF
  for x in capsule runc crun; do
    cat >>"$S/cri/config.toml" <<EOF
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$x]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$x.options]
    BinaryName = "$(path_of $x)"
EOF
  done
  nsenter --net=/run/netns/$NS containerd --config "$S/cri/config.toml" >"$S/cri/log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 300); do cr version >/dev/null 2>&1 && break; sleep 0.2; done
  # the image, with sleep as the sandbox's process (containerd runs the image's command)
  umoci init --layout "$S/cri/img" >/dev/null && umoci new --image "$S/cri/img:1" >/dev/null &&
    umoci unpack --image "$S/cri/img:1" "$S/cri/b" >/dev/null && cp -a "$r/." "$S/cri/b/rootfs/" &&
    umoci repack --image "$S/cri/img:1" "$S/cri/b" >/dev/null &&
    umoci config --image "$S/cri/img:1" --config.env PATH=/bin --config.cmd sleep --config.cmd 2147483647 >/dev/null &&
    (cd "$S/cri/img" && tar cf ../img.tar .) &&
    ctr --address "$S/cri/sock" -n k8s.io image import --index-name $I "$S/cri/img.tar" >/dev/null
  CRICTL_OK=1
}

# ---- CRI: a pod sandbox on the host's network (no CNI here) and its containers
cri_pod() { # name -> pod id
  printf '{"metadata":{"name":"%s","namespace":"default","uid":"%s"},"linux":{"security_context":{"namespace_options":{"network":2}}}}' "$1" "$1-$$" >"$S/cri/pod-$1.json"
  cr runp --runtime "$RT" "$S/cri/pod-$1.json"
}
cri_ctr() { # pod name cmd... -> container id (created and started)
  local pod=$1 name=$2; shift 2
  local args; args=$(printf '"%s",' "$@"); args=${args%,}
  printf '{"metadata":{"name":"%s"},"image":{"image":"%s"},"command":[%s],"linux":{}}' "$name" "$I" "$args" >"$S/cri/c-$name.json"
  local c; c=$(cr create "$pod" "$S/cri/c-$name.json" "$S/cri/pod-$(cr inspectp "$pod" | jq -r .status.metadata.name).json") && cr start "$c" >/dev/null && echo "$c"
}

# ---- the cells: each prints nothing and returns 0 when it holds
ok() { "$@" >/dev/null 2>&1; }
cell() { # engine cell
  local e=$1 c=$2
  case $e in docker) E="dk"; X="--runtime $RT";; podman) E="pm_root"; X="";; rootless) E="pm_rootless"; X="--network none";; esac
  local n=eng-$c-$RT
  case $e:$c in
    cri:*) cri_cell "$c"; return;;
  esac
  case $c in
    output) [ "$($E run --rm $X $I sh -c 'echo out; exit 7')" = out ] && { $E run --rm $X $I sh -c 'exit 7'; [ $? = 7 ]; } ;;
    exec) $E run -d --name $n $X $I sleep 100 >/dev/null; $E exec $n sh -c 'exit 4'; local s=$?; $E rm -f $n >/dev/null 2>&1; [ $s = 4 ] ;;
    tty) $E run --rm -t $X $I tty </dev/null | grep -q /dev/pts/ ;;
    kill) $E run -d --name $n $X $I sh -c "trap 'exit 3' TERM; while true; do sleep 0.1; done" >/dev/null; sleep 0.5
      $E kill -s TERM $n >/dev/null; sleep 1; local x; x=$($E inspect -f '{{.State.ExitCode}}' $n); $E rm -f $n >/dev/null 2>&1; [ "$x" = 3 ] ;;
    stop) $E run -d --name $n $X $I sleep 100 >/dev/null; $E stop -t 1 $n >/dev/null; local x; x=$($E inspect -f '{{.State.ExitCode}}' $n); $E rm -f $n >/dev/null 2>&1; [ "$x" = 137 ] ;;
    readonly) ! ok $E run --rm --read-only $X $I touch /x && ok $E run --rm --read-only $X $I true ;;
    memory) [ $e = rootless ] && return 2; $E run --rm $X -m 32m --memory-swap 32m $I sh -c 'head -c 100m /dev/zero | tail >/dev/null' >/dev/null 2>&1; [ $? = 137 ] ;;
    pids) [ $e = rootless ] && return 2; local o; o=$($E run --rm $X --pids-limit 8 $I sh -c 'for i in $(seq 12); do sleep 2 & done; wait' 2>&1); [[ $o == *"can't fork"* ]] ;;
    bind) rm -f "$S/bind/w"; ok $E run --rm $X -v "$S/bind:/b" $I sh -c 'echo w > /b/w' && [ -e "$S/bind/w" ] && ! ok $E run --rm $X -v "$S/bind:/b:ro" $I sh -c 'echo w > /b/w2' ;;
    home) [ "$($E run --rm $X $I sh -c 'echo $HOME')" = /root ] && [ "$($E run --rm $X --user 1000 $I sh -c 'echo $HOME')" = /home/app ] ;;
    init) $E run --rm $X --init $I cat /proc/1/cmdline | grep -q init ;;
    user) [ "$($E run --rm $X --user 1000:1000 $I id -u)" = 1000 ] ;;
    caps) $E run --rm $X --cap-drop ALL --cap-add NET_ADMIN $I grep CapEff /proc/self/status | grep -q 0000000000001000 ;;
    nnp) $E run --rm $X --security-opt no-new-privileges $I grep NoNewPrivs /proc/self/status | grep -q 1 ;;
    unconfined) $E run --rm $X --security-opt seccomp=unconfined $I grep '^Seccomp:' /proc/self/status | grep -q 0 ;;
    netnone) $E run --rm --network none $I ip -o addr | grep -q 127.0.0.1 ;;
    bridge) [ $e = rootless ] && return 2; $E run --rm $I ip -o -4 addr show eth0 | grep -q inet ;;
    tmpfs) ok $E run --rm $X --tmpfs /scratch:size=1m $I sh -c 'grep -q " /scratch " /proc/mounts && echo a > /scratch/a' ;;
    device) [ $e = rootless ] && return 2; [ "$($E run --rm $X --device /dev/zero:/dev/myzero $I sh -c 'head -c 3 /dev/myzero | wc -c')" = 3 ] ;;
    pause) [ $e = rootless ] && return 2; $E run -d --name $n $X $I sleep 100 >/dev/null; ok $E pause $n && [ "$($E inspect -f '{{.State.Status}}' $n)" = paused ] && ok $E unpause $n; local s=$?; $E rm -f $n >/dev/null 2>&1; return $s ;;
    logs) $E run -d --name $n $X $I sh -c 'echo logged; sleep 100' >/dev/null; sleep 0.5; $E logs $n | grep -q logged; local s=$?; $E rm -f $n >/dev/null 2>&1; return $s ;;
    cp) echo cpin >"$S/cpin"; chmod 644 "$S/cpin"; $E run -d --name $n $X $I sleep 100 >/dev/null; ok $E cp "$S/cpin" $n:/tmp/cpin && [ "$($E exec $n cat /tmp/cpin)" = cpin ] && ok $E cp $n:/etc/passwd "$S/cpout-$e-$RT"; local s=$?; $E rm -f $n >/dev/null 2>&1; return $s ;;
    stats) [ $e = rootless ] && return 2; $E run -d --name $n $X $I sleep 100 >/dev/null; ok $E stats --no-stream $n; local s=$?; $E rm -f $n >/dev/null 2>&1; return $s ;;
    update) [ $e != docker ] && return 2; $E run -d --name $n $X $I sleep 100 >/dev/null; ok $E update --memory 64m --memory-swap 64m $n && [ "$($E exec $n cat /sys/fs/cgroup/memory/memory.limit_in_bytes)" = 67108864 ]; local s=$?; $E rm -f $n >/dev/null 2>&1; return $s ;;
    restart) [ $e != docker ] && return 2; $E run -d --name $n $X --restart on-failure:2 $I sh -c 'exit 5' >/dev/null; local x=""; for _ in $(seq 40); do x=$($E inspect -f '{{.RestartCount}} {{.State.Status}}' $n); [ "$x" = "2 exited" ] && break; sleep 0.5; done; $E rm -f $n >/dev/null 2>&1; [ "$x" = "2 exited" ] ;;
    health) [ $e != docker ] && return 2; $E run -d --name $n $X --health-cmd true --health-interval 1s $I sleep 100 >/dev/null; local x=""; for _ in $(seq 40); do x=$($E inspect -f '{{.State.Health.Status}}' $n); [ "$x" = healthy ] && break; sleep 0.5; done; $E rm -f $n >/dev/null 2>&1; [ "$x" = healthy ] ;;
    rmf) local id; id=$($E run -d --name $n $X $I sleep 100); sleep 0.5; ok $E rm -f $n; sleep 1; ! pgrep -f "$id" >/dev/null && ! grep -q "$id" /proc/self/mountinfo && ! find /sys/fs/cgroup/pids -name "*$id*" | grep -q . ;;
    *) return 2 ;;
  esac
}
cri_cell() {
  local c=$1 p k
  case $c in
    output) p=$(cri_pod o-$RT) && k=$(cri_ctr "$p" o-$RT sh -c 'echo out; exit 7') && sleep 1 && [ "$(cr logs "$k" 2>/dev/null)" = out ] && [ "$(cr inspect "$k" | jq .status.exitCode)" = 7 ] ;;
    exec) p=$(cri_pod e-$RT) && k=$(cri_ctr "$p" e-$RT sleep 100) && [ "$(cr exec "$k" sh -c 'echo in')" = in ] && ! cr exec "$k" sh -c 'exit 4' >/dev/null 2>&1 ;;
    tty) return 2 ;; # crictl exec -t needs a terminal of its own
    stop) p=$(cri_pod s-$RT) && k=$(cri_ctr "$p" s-$RT sleep 100) && cr stop -t 1 "$k" >/dev/null && [ "$(cr inspect "$k" | jq -r .status.state)" = CONTAINER_EXITED ] ;;
    home) p=$(cri_pod h-$RT) && k=$(cri_ctr "$p" h-$RT sh -c 'echo $HOME') && sleep 1 && [ "$(cr logs "$k" 2>/dev/null)" = /root ] ;;
    pod) p=$(cri_pod m-$RT) && a=$(cri_ctr "$p" ma-$RT sleep 100) && b=$(cri_ctr "$p" mb-$RT sleep 100) &&
      [ "$(cr exec "$a" cat /proc/1/cmdline | tr '\0' ' ')" = "$(cr exec "$b" cat /proc/1/cmdline | tr '\0' ' ')" ] ;;
    rmf) p=$(cri_pod r-$RT) && k=$(cri_ctr "$p" r-$RT sleep 100) && ok cr rmp -f "$p" && sleep 1 && ! pgrep -f "$k" >/dev/null && ! find /sys/fs/cgroup/pids -name "*$k*" | grep -q . ;;
    *) return 2 ;;
  esac
}
CELLS="output exec tty kill stop readonly memory pids bind home init user caps nnp unconfined netnone bridge tmpfs device pause logs cp stats update restart health rmf pod"

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }
bench_one() { # engine runtime -> seconds of one start
  local e=$1 t0 t1; RT=$2
  t0=$(now)
  case $e in
    docker) dk run --rm --runtime "$RT" $I true >/dev/null 2>&1 || echo FAIL >&2 ;;
    podman) pm_root run --rm $I true >/dev/null 2>&1 || echo FAIL >&2 ;;
    rootless) pm_rootless run --rm --network none $I true >/dev/null 2>&1 || echo FAIL >&2 ;;
    cri) local p k; p=$(cri_pod b-$RT-$RANDOM) && k=$(cri_ctr "$p" b-$RT true) || echo FAIL >&2; t1=$(now); cr rmp -f "$p" >/dev/null 2>&1; echo "$t1 - $t0" | bc; return ;;
  esac
  t1=$(now); echo "$t1 - $t0" | bc
}

declare -A RES
for e in $ENGINES; do
  case $e in
    docker) start_docker ;; podman) start_podman ;; rootless) start_rootless ;; cri) start_cri || continue ;;
  esac
  if [ "$BENCH" -gt 0 ]; then
    for rt in $RUNTIMES; do bench_one "$e" "$rt" >/dev/null 2>&1; done # warm up
    for i in $(seq "$BENCH"); do
      for rt in $RUNTIMES; do bench_one "$e" "$rt" >>"$S/bench-$e-$rt" 2>>"$S/bench-$e-$rt.err"; done
    done
    continue
  fi
  for rt in $RUNTIMES; do
    RT=$rt
    for c in $CELLS; do
      cell "$e" "$c"; s=$?
      case $s in 0) RES[$e/$rt/$c]=pass ;; 2) RES[$e/$rt/$c]=- ;; *) RES[$e/$rt/$c]=FAIL ;; esac
    done
  done
done

if [ "$BENCH" -gt 0 ]; then
  printf '%-10s' engine; for rt in $RUNTIMES; do printf ' %14s' "$rt (s)"; done; printf ' %16s %16s\n' "capsule/runc" "capsule/crun"
  for e in $ENGINES; do
    [ -e "$S/bench-$e-capsule" ] || continue
    printf '%-10s' "$e"; declare -A M=()
    for rt in $RUNTIMES; do
      M[$rt]=$(median <"$S/bench-$e-$rt"); fails=$(grep -c FAIL "$S/bench-$e-$rt.err" 2>/dev/null)
      # a runtime whose every run failed has no figure
      [ "${fails:-0}" -ge "$BENCH" ] && M[$rt]=failed
      printf ' %14s' "${M[$rt]}$([ "${fails:-0}" -gt 0 ] && [ "${fails:-0}" -lt "$BENCH" ] && echo "($fails!)")"
    done
    ratio() { [ "$1" = failed ] || [ "$2" = failed ] && { echo -; return; }; echo "scale=2; $1 / $2" | bc; }
    printf ' %16s %16s\n' "$(ratio "${M[capsule]}" "${M[runc]}")" "$(ratio "${M[capsule]}" "${M[crun]}")"
  done
  echo "($BENCH runs each, interleaved; median seconds of one start to exit; (N!): N runs failed; load: $(cut -d' ' -f1-3 /proc/loadavg))"
  exit 0
fi

printf '%-11s' cell
for e in $ENGINES; do for rt in $RUNTIMES; do printf ' %-18s' "$e/$rt"; done; done; echo
for c in $CELLS; do
  printf '%-11s' "$c"
  for e in $ENGINES; do for rt in $RUNTIMES; do printf ' %-18s' "${RES[$e/$rt/$c]:-}"; done; done; echo
done
printf '%-11s' passed
for e in $ENGINES; do for rt in $RUNTIMES; do
  n=0; t=0; for c in $CELLS; do v=${RES[$e/$rt/$c]:-}; [ "$v" = pass ] && n=$((n+1)); [ "$v" = pass ] || [ "$v" = FAIL ] && t=$((t+1)); done
  printf ' %-18s' "$n/$t"
done; done; echo
