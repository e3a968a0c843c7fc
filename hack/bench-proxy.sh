#!/usr/bin/env bash
# Benchmark of the network allowlist proxy against a direct loopback connection.
#
#   hack/bench-proxy.sh            (env: BYTES=1073741824 ROUNDS=5 REQUESTS=1000)
#   PIN_CLIENT=0 PIN_SERVER=0 PIN_PROXY=1 hack/bench-proxy.sh
#                                  (pin each to CPUs with taskset; default: unpinned)
#
# Throughput: BYTES through one connection, upload and download, three ways:
#   direct    client -> server                                  (127.0.0.1)
#   proxy     client -> proxy (CONNECT, TCP listener) -> server
#   relay     client -> relay, which hands the accepted socket to the proxy -> server
#             (the path a sandboxed command takes in allowlist mode, minus the namespace)
# with the proxy process's CPU time per GiB moved (user+system, from /proc; softirq work
# the kernel does for it is not included).
# Latency: REQUESTS sequential small HTTP GETs, a new connection each, direct vs plain
# HTTP forwarding through the proxy and through relay+proxy.
# Reports medians over ROUNDS rounds and the ratios proxy/direct. Target: proxy
# throughput >= 80 % of direct. Everything listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${BYTES:-1073741824}
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-1000}
TARGET=${CARGO_TARGET_DIR:-target}

if [ -z "${CAPSULE_BIN:-}" ]; then
  cargo build --release -q -p capsule-runtime --bin capsule
  CAPSULE_BIN=$TARGET/release/capsule
fi
work=$(mktemp -d /dev/shm/bench-proxy.XXXXXX 2>/dev/null || mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
rustc -O --edition 2021 hack/bench-proxy-helper.rs -o "$work/helper"
pin() { [ -n "${1:-}" ] && echo taskset -c "$1"; true; }
H=$work/helper
HC="$(pin "${PIN_CLIENT:-}") $H"   # the client
HS="$(pin "${PIN_SERVER:-}") $H"   # the servers
PX="$(pin "${PIN_PROXY:-}")"       # the proxy

# start a background program and wait for its first N stdout lines
start() { # name nlines cmd...
  local name=$1 n=$2; shift 2
  : >"$work/$name.out"
  "$@" >>"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  for _ in $(seq 1 200); do
    [ "$(wc -l <"$work/$name.out")" -ge "$n" ] && return 0
    sleep 0.05
  done
  echo "bench-proxy: $name did not start: $(cat "$work/$name.err")" >&2; exit 1
}
start data 1 $HS data-server
start http 1 $HS http-server
DATA=127.0.0.1:$(head -1 "$work/data.out")
HTTP=127.0.0.1:$(head -1 "$work/http.out")
start proxy 2 $PX "$CAPSULE_BIN" proxy --allow 127.0.0.1 --listen 127.0.0.1:0 --relay 127.0.0.1:0
PROXY_PID=${pids[-1]}
PROXY=$(awk '$3=="tcp"{print $4}' "$work/proxy.out")
RELAY=$(awk '$3=="relay"{print $4}' "$work/proxy.out")

tick=$(getconf CLK_TCK)
cpu() { awk -v t="$tick" '{print ($14+$15)/t}' "/proc/$PROXY_PID/stat"; }
# one transfer: MiB/s into tp-VIA-DIR, proxy CPU s/GiB into cpu-VIA-DIR
transfer() { # via dir [proxy-addr]
  local c0 c1; c0=$(cpu)
  echo "$($HC throughput "$DATA" "$BYTES" "$2" ${3:+"$3"})" >>"$work/tp-$1-$2"
  c1=$(cpu)
  awk -v a="$c0" -v b="$c1" -v n="$BYTES" 'BEGIN{printf "%.3f\n", (b-a)*1073741824/n}' >>"$work/cpu-$1-$2"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A tp lat p99 cpu
for r in $(seq 1 "$ROUNDS"); do
  for dir in up down; do
    transfer direct $dir
    transfer proxy $dir "$PROXY"
    transfer relay $dir "$RELAY"
  done
  for via in direct proxy relay; do
    case $via in direct) p=();; proxy) p=("$PROXY");; relay) p=("$RELAY");; esac
    read -r m q < <($HC latency "$HTTP" "$REQUESTS" "${p[@]}")
    echo "$m" >>"$work/lat-$via"; echo "$q" >>"$work/p99-$via"
  done
done

for f in "$work"/tp-* "$work"/lat-* "$work"/p99-* "$work"/cpu-*; do
  k=$(basename "$f"); v=$(median <"$f")
  case $k in tp-*) tp[${k#tp-}]=$v;; lat-*) lat[${k#lat-}]=$v;; p99-*) p99[${k#p99-}]=$v;; cpu-*) cpu[${k#cpu-}]=$v;; esac
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
echo "proxy benchmark: $(( BYTES / 1048576 )) MiB per transfer, $REQUESTS requests per latency run, median of $ROUNDS rounds ($(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
[ -n "${PIN_CLIENT:-}${PIN_SERVER:-}${PIN_PROXY:-}" ] && echo "pinned: client cpu ${PIN_CLIENT:-any}, servers cpu ${PIN_SERVER:-any}, proxy cpu ${PIN_PROXY:-any}"
printf '%-28s %12s %12s %12s %10s %10s\n' "throughput (MiB/s)" direct proxy relay proxy/dir relay/dir
for dir in up down; do
  case $dir in up) what="up (client->server)";; down) what="down (server->client)";; esac
  printf '%-28s %12s %12s %12s %10s %10s\n' "  $what" "${tp[direct-$dir]}" "${tp[proxy-$dir]}" "${tp[relay-$dir]}" \
    "$(ratio "${tp[proxy-$dir]}" "${tp[direct-$dir]}")" "$(ratio "${tp[relay-$dir]}" "${tp[direct-$dir]}")"
done
printf '%-28s %12s %12s %12s\n' "proxy CPU (s per GiB)" "" proxy relay
for dir in up down; do
  printf '%-28s %12s %12s %12s\n' "  $dir" "" "${cpu[proxy-$dir]}" "${cpu[relay-$dir]}"
done
printf '%-28s %12s %12s %12s %10s %10s\n' "latency per request (us)" direct proxy relay proxy/dir relay/dir
printf '%-28s %12s %12s %12s %10s %10s\n' "  median" "${lat[direct]}" "${lat[proxy]}" "${lat[relay]}" \
  "$(ratio "${lat[proxy]}" "${lat[direct]}")" "$(ratio "${lat[relay]}" "${lat[direct]}")"
printf '%-28s %12s %12s %12s %10s %10s\n' "  p99" "${p99[direct]}" "${p99[proxy]}" "${p99[relay]}" \
  "$(ratio "${p99[proxy]}" "${p99[direct]}")" "$(ratio "${p99[relay]}" "${p99[direct]}")"
printf 'added latency (median): proxy +%s us, relay+proxy +%s us\n' \
  "$(awk -v a="${lat[proxy]}" -v b="${lat[direct]}" 'BEGIN{print a-b}')" \
  "$(awk -v a="${lat[relay]}" -v b="${lat[direct]}" 'BEGIN{print a-b}')"
pass=$(awk -v a="${tp[relay-up]}" -v b="${tp[direct-up]}" -v c="${tp[relay-down]}" -v d="${tp[direct-down]}" 'BEGIN{print (a/b>=0.8 && c/d>=0.8) ? "met" : "NOT met"}')
echo "target (relay path throughput >= 80% of direct): $pass"
