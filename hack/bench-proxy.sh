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
#   floor     client -> a minimal splice(2) CONNECT relay of the helper's -> server: the
#             kernel's cost of a second connection; the proxy's CPU per GiB is compared
#             with this relay's (target: <= 1.25x)
# Reports medians over ROUNDS rounds and the ratios proxy/direct. Everything listens on
# 127.0.0.1 only.
#
# Then, with curl (and python3 + openssl for the servers), HTTP GETs of BYTES side by side:
#   plain HTTP    direct, capsule's proxy (forwarding), srt (Anthropic's sandbox-runtime,
#                 `srt` from npm `@anthropic-ai/sandbox-runtime`: $SRT or on PATH; skipped
#                 with a note otherwise: this script installs nothing)
#   HTTPS         direct, a CONNECT tunnel through capsule's proxy (TLS untouched), and
#                 a tunnel the proxy terminates (a secret for that host: the path a request
#                 carrying a secret takes), each in MB/s, with ratios to direct.
#
#   ONLY=https hack/bench-proxy.sh    just the HTTPS downloads
#   BASE_BIN=/path/to/capsule         also a terminated tunnel through that binary's proxy
#                                     (e.g. main's), interleaved with this one's round by
#                                     round (the order alternating), with the ratio new/base:
#                                     what scrubbing responses costs
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
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work" "${srt_dir:-}"; }
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
start floor 1 $PX $H splice-relay
FLOOR_PID=${pids[-1]}
FLOOR=127.0.0.1:$(head -1 "$work/floor.out")

tick=$(getconf CLK_TCK)
cpu() { awk -v t="$tick" '{print ($14+$15)/t}' "/proc/${1:-$PROXY_PID}/stat"; }
# one transfer: MiB/s into tp-VIA-DIR, proxy CPU s/GiB into cpu-VIA-DIR
transfer() { # via dir [proxy-addr]
  local pid=$PROXY_PID c0 c1
  [ "$1" = floor ] && pid=$FLOOR_PID
  c0=$(cpu $pid)
  echo "$($HC throughput "$DATA" "$BYTES" "$2" ${3:+"$3"})" >>"$work/tp-$1-$2"
  c1=$(cpu $pid)
  awk -v a="$c0" -v b="$c1" -v n="$BYTES" 'BEGIN{printf "%.3f\n", (b-a)*1073741824/n}' >>"$work/cpu-$1-$2"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# srt: $SRT, else `srt` on PATH; it needs bubblewrap, socat and ripgrep (apt-get install -y
# bubblewrap socat ripgrep). Its proxy must be allowed to reach the loopback server, and
# curl must not skip the proxy for 127.0.0.1 (srt's NO_PROXY lists it).
SRT="${SRT:-$(command -v srt || true)}"
srt_note="not found (npm install --prefix DIR @anthropic-ai/sandbox-runtime, then SRT=DIR/node_modules/.bin/srt); skipped"
if [ -n "$SRT" ] && [ -x "$SRT" ]; then
  srt_note=""
  # srt's sandbox has a /dev/shm of its own: the helper it runs is copied next to /tmp
  srt_dir=$(mktemp -d /tmp/bench-proxy-srt.XXXXXX); cp "$H" "$srt_dir/helper"
  printf '{"network":{"allowedDomains":["127.0.0.1"],"deniedDomains":[]},"filesystem":{"denyRead":[],"allowWrite":["%s"],"denyWrite":[]}}\n' "$work" >"$work/srt.json"
fi

declare -A tp lat p99 cpu
if [ "${ONLY:-}" != https ]; then
for r in $(seq 1 "$ROUNDS"); do
  for dir in up down; do
    transfer direct $dir
    transfer proxy $dir "$PROXY"
    transfer relay $dir "$RELAY"
    transfer floor $dir "$FLOOR"
  done
  for via in direct proxy relay; do
    case $via in direct) p=();; proxy) p=("$PROXY");; relay) p=("$RELAY");; esac
    read -r m q < <($HC latency "$HTTP" "$REQUESTS" "${p[@]}")
    echo "$m" >>"$work/lat-$via"; echo "$q" >>"$work/p99-$via"
  done
  if [ -z "$srt_note" ]; then
    # the same requests from inside srt, through its proxy (credentials from its HTTP_PROXY)
    if read -r m q < <("$SRT" -s "$work/srt.json" -c "$srt_dir/helper latency $HTTP $REQUESTS env" 2>>"$work/srt.err"); then
      echo "$m" >>"$work/lat-srt"; echo "$q" >>"$work/p99-srt"
    fi
  fi
done

for f in "$work"/tp-* "$work"/lat-* "$work"/p99-* "$work"/cpu-*; do
  k=$(basename "$f"); v=$(median <"$f")
  case $k in tp-*) tp[${k#tp-}]=$v;; lat-*) lat[${k#lat-}]=$v;; p99-*) p99[${k#p99-}]=$v;; cpu-*) cpu[${k#cpu-}]=$v;; esac
done
echo "proxy benchmark: $(( BYTES / 1048576 )) MiB per transfer, $REQUESTS requests per latency run, median of $ROUNDS rounds ($(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
[ -n "${PIN_CLIENT:-}${PIN_SERVER:-}${PIN_PROXY:-}" ] && echo "pinned: client cpu ${PIN_CLIENT:-any}, servers cpu ${PIN_SERVER:-any}, proxy cpu ${PIN_PROXY:-any}"
printf '%-28s %12s %12s %12s %12s %10s %10s\n' "throughput (MiB/s)" direct proxy relay floor proxy/dir relay/dir
for dir in up down; do
  case $dir in up) what="up (client->server)";; down) what="down (server->client)";; esac
  printf '%-28s %12s %12s %12s %12s %10s %10s\n' "  $what" "${tp[direct-$dir]}" "${tp[proxy-$dir]}" "${tp[relay-$dir]}" "${tp[floor-$dir]}" \
    "$(ratio "${tp[proxy-$dir]}" "${tp[direct-$dir]}")" "$(ratio "${tp[relay-$dir]}" "${tp[direct-$dir]}")"
done
printf '%-28s %12s %12s %12s %12s %10s\n' "relay CPU (s per GiB)" "" proxy relay floor relay/floor
for dir in up down; do
  printf '%-28s %12s %12s %12s %12s %10s\n' "  $dir" "" "${cpu[proxy-$dir]}" "${cpu[relay-$dir]}" "${cpu[floor-$dir]}" \
    "$(awk -v a="${cpu[relay-$dir]}" -v b="${cpu[floor-$dir]}" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "n/a" }')"
done
printf '%-28s %12s %12s %12s %10s %10s\n' "latency per request (us)" direct proxy relay proxy/dir relay/dir
printf '%-28s %12s %12s %12s %10s %10s\n' "  median" "${lat[direct]}" "${lat[proxy]}" "${lat[relay]}" \
  "$(ratio "${lat[proxy]}" "${lat[direct]}")" "$(ratio "${lat[relay]}" "${lat[direct]}")"
printf '%-28s %12s %12s %12s %10s %10s\n' "  p99" "${p99[direct]}" "${p99[proxy]}" "${p99[relay]}" \
  "$(ratio "${p99[proxy]}" "${p99[direct]}")" "$(ratio "${p99[relay]}" "${p99[direct]}")"
if [ -n "${lat[srt]:-}" ]; then
  printf '%-28s %12s %12s %12s %10s\n' "  srt (median, p99)" "${lat[srt]}" "${p99[srt]}" "" "$(ratio "${lat[srt]}" "${lat[direct]}")"
  echo "  capsule proxy vs srt, median latency: $(ratio "${lat[srt]}" "${lat[proxy]}")x lower"
fi
printf 'added latency (median): proxy +%s us, relay+proxy +%s us\n' \
  "$(awk -v a="${lat[proxy]}" -v b="${lat[direct]}" 'BEGIN{print a-b}')" \
  "$(awk -v a="${lat[relay]}" -v b="${lat[direct]}" 'BEGIN{print a-b}')"
pass=$(awk -v a="${cpu[relay-up]}" -v b="${cpu[floor-up]}" -v c="${cpu[relay-down]}" -v d="${cpu[floor-down]}" 'BEGIN{print (b > 0 && d > 0 && a/b<=1.25 && c/d<=1.25) ? "met" : "NOT met"}')
echo "target (relay path CPU per GiB <= 1.25x the splice floor's): $pass"
fi

# ---- side by side with curl: plain HTTP (and srt), HTTPS direct / tunnelled / terminated
if ! command -v curl >/dev/null || ! command -v python3 >/dev/null || ! command -v openssl >/dev/null; then
  echo "curl comparison: skipped (needs curl, python3 and openssl)"; exit 0
fi
cat >"$work/big.py" <<'PY'
import http.server, ssl, sys
n = int(sys.argv[1]); chunk = b"\0" * (1 << 20)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(n)); self.end_headers()
        left = n
        while left > 0:
            k = min(left, len(chunk)); self.wfile.write(chunk[:k]); left -= k
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 2:
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[2], sys.argv[3])
    s.socket = c.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
# a test CA and a server certificate for 127.0.0.1 signed by it
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -days 2 -keyout "$work/ca.key" -out "$work/ca.pem" -subj /CN=bench-ca 2>/dev/null
openssl req $ec -keyout "$work/srv.key" -out "$work/srv.csr" -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$work/srv.ext"
openssl x509 -req -in "$work/srv.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -days 2 -extfile "$work/srv.ext" -out "$work/srv.pem" 2>/dev/null
PS="$(pin "${PIN_SERVER:-}")"
start bighttp 1 $PS python3 "$work/big.py" "$BYTES"
start bigtls 1 $PS python3 "$work/big.py" "$BYTES" "$work/srv.pem" "$work/srv.key"
BIGHTTP=127.0.0.1:$(head -1 "$work/bighttp.out")
BIGTLS=127.0.0.1:$(head -1 "$work/bigtls.out")
mkdir -p "$work/ca"
start tproxy 1 env BENCH_TOKEN=bench CAPSULE_PROXY_TEST_UPSTREAM_CA="$work/ca.pem" $PX "$CAPSULE_BIN" proxy \
  --allow 127.0.0.1 --listen 127.0.0.1:0 --secret "BENCH_TOKEN=$BIGTLS" --ca-dir "$work/ca"
TPROXY=$(awk '$3=="tcp"{print $4}' "$work/tproxy.out")
if [ -n "${BASE_BIN:-}" ]; then
  mkdir -p "$work/bca"
  start bproxy 1 env BENCH_TOKEN=bench CAPSULE_PROXY_TEST_UPSTREAM_CA="$work/ca.pem" $PX "$BASE_BIN" proxy \
    --allow 127.0.0.1 --listen 127.0.0.1:0 --secret "BENCH_TOKEN=$BIGTLS" --ca-dir "$work/bca"
  BPROXY=$(awk '$3=="tcp"{print $4}' "$work/bproxy.out")
fi
terminated() { # which (new|base)
  case $1 in
    new) $C -x "http://$TPROXY" --cacert "$work/ca/proxy-ca.pem" "https://$BIGTLS/" >>"$work/c-tls-terminated";;
    base) $C -x "http://$BPROXY" --cacert "$work/bca/proxy-ca.pem" "https://$BIGTLS/" >>"$work/c-tls-terminated-base";;
  esac
  if [ "$1" = new ]; then echo >>"$work/c-tls-terminated"; else echo >>"$work/c-tls-terminated-base"; fi
}
C="$(pin "${PIN_CLIENT:-}") curl -sS --max-time 60 -o /dev/null -w %{speed_download}"
for r in $(seq 1 "$ROUNDS"); do
  if [ "${ONLY:-}" != https ]; then
  $C --noproxy '*' "http://$BIGHTTP/" >>"$work/c-http-direct"; echo >>"$work/c-http-direct"
  $C -x "http://$PROXY" "http://$BIGHTTP/" >>"$work/c-http-proxy"; echo >>"$work/c-http-proxy"
  fi
  if [ -z "$srt_note" ] && [ "${ONLY:-}" != https ]; then
    # srt runs the command in its sandbox with its own proxy; loopback must be allowed there
    "$SRT" -s "$work/srt.json" -c "curl --noproxy '' -sS -o /dev/null -w '%{speed_download}' http://$BIGHTTP/" >>"$work/c-http-srt" 2>>"$work/srt.err" || srt_note="failed: $(tail -1 "$work/srt.err")"
    echo >>"$work/c-http-srt"
  fi
  $C --noproxy '*' --cacert "$work/ca.pem" "https://$BIGTLS/" >>"$work/c-tls-direct"; echo >>"$work/c-tls-direct"
  $C -x "http://$PROXY" --cacert "$work/ca.pem" "https://$BIGTLS/" >>"$work/c-tls-tunnel"; echo >>"$work/c-tls-tunnel"
  if [ -z "${BASE_BIN:-}" ]; then terminated new
  elif [ $((r % 2)) = 1 ]; then terminated new; terminated base
  else terminated base; terminated new
  fi
done
mb() { median <"$work/c-$1" | awk '{printf "%.0f", $1/1e6}'; }
echo "curl GET of $(( BYTES / 1048576 )) MiB (MB/s, median of $ROUNDS)"
if [ "${ONLY:-}" != https ]; then
printf '%-28s %12s %12s %12s %12s\n' "  plain HTTP" direct "capsule" srt "capsule/dir"
printf '%-28s %12s %12s %12s %12s\n' "" "$(mb http-direct)" "$(mb http-proxy)" "$([ -z "$srt_note" ] && mb http-srt || echo -)" \
  "$(ratio "$(mb http-proxy)" "$(mb http-direct)")"
[ -n "$srt_note" ] && echo "  srt: $srt_note"
[ -z "$srt_note" ] && echo "  capsule/srt: $(ratio "$(mb http-proxy)" "$(mb http-srt)") (target >= 3)"
fi
printf '%-28s %12s %12s %12s %12s %12s\n' "  HTTPS" direct tunnel terminated tunnel/dir term/dir
printf '%-28s %12s %12s %12s %12s %12s\n' "" "$(mb tls-direct)" "$(mb tls-tunnel)" "$(mb tls-terminated)" \
  "$(ratio "$(mb tls-tunnel)" "$(mb tls-direct)")" "$(ratio "$(mb tls-terminated)" "$(mb tls-direct)")"
if [ -n "${BASE_BIN:-}" ]; then
  printf '%-28s %12s %12s %12s\n' "  HTTPS terminated" this base this/base
  printf '%-28s %12s %12s %12s\n' "" "$(mb tls-terminated)" "$(mb tls-terminated-base)" \
    "$(ratio "$(mb tls-terminated)" "$(mb tls-terminated-base)")"
  echo "  rounds, this (bytes/s): $(tr '\n' ' ' <"$work/c-tls-terminated")"
  echo "  rounds, base (bytes/s): $(tr '\n' ' ' <"$work/c-tls-terminated-base")"
fi
