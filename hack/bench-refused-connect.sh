#!/usr/bin/env bash
# Benchmark: what naming the program behind a refused connect costs the allowlist proxy
# under `capsule exec` (runtime/src/net/owner.rs: the lookup runs for refused
# connections only), this binary vs BASE_BIN (e.g. main's, which names none).
#
# Inside `capsule exec --allow-host 127.0.0.1:PORT` (a small HTTP server of this script's
# on the host's 127.0.0.1), one Python client makes REQUESTS sequential requests of each
# kind through the proxy at 127.0.0.1:3128, a new connection each:
#   allowed   GET http://127.0.0.1:PORT/ (plain forwarding: the path every allowed
#             connection takes; the lookup must cost it nothing)
#   refused   CONNECT 127.0.0.1:9 (not on the allowlist: answered 403; the proxy connects
#             nowhere), each refusal looked up anew
# and prints the median time per request. ROUNDS rounds, the two binaries alternating
# which goes first; prints the median over rounds of each binary's medians and the
# ratios new/base. Everything listens on 127.0.0.1 only.
#
#   BASE_BIN=/path/to/capsule-of-main hack/bench-refused-connect.sh
#   (env: BIN, default the release build; ROUNDS=7 REQUESTS=300)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-7}"
REQUESTS="${REQUESTS:-300}"
BIN="${BIN:-$(hack/build-release.sh)}"
: "${BASE_BIN:?set BASE_BIN to a capsule binary to compare with, e.g. one built from main}"

# shellcheck source=hack/bench-capsule.sh
. hack/bench-capsule.sh refused-connect

python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
' >"$W/http.port" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 1 100); do [ -s "$W/http.port" ] && break; sleep 0.05; done
PORT=$(head -1 "$W/http.port")

cat >"$WS/client.py" <<'PY'
import socket, statistics, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def one(req):
    s = socket.create_connection(("127.0.0.1", 3128))
    t = time.perf_counter()
    s.sendall(req)
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
        if got.startswith(b"HTTP/1.1 200") and got.endswith(b"ok"):
            break
    d = time.perf_counter() - t
    s.close()
    return d, got.split(b" ", 2)[1]
allowed = f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
refused = b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
out = {}
for name, req, want in [("allowed", allowed, b"200"), ("refused", refused, b"403")]:
    ts = []
    for _ in range(n):
        d, code = one(req)
        assert code == want, (name, code)
        ts.append(d)
    out[name] = statistics.median(ts) * 1e6
print(f"{out['allowed']:.1f} {out['refused']:.1f}")
PY

run() { # bin -> "allowed refused" (us)
  "$1" exec bench --quiet-refusals --allow-host "127.0.0.1:$PORT" -- python3 client.py "$PORT" "$REQUESTS" </dev/null
}
: >"$W/new"; : >"$W/base"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run "$BIN" >>"$W/new"; run "$BASE_BIN" >>"$W/base"
  else run "$BASE_BIN" >>"$W/base"; run "$BIN" >>"$W/new"; fi
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
col() { awk -v c="$2" '{print $c}' "$W/$1" | median; }
echo "refused vs allowed connects through the proxy under capsule exec: $REQUESTS requests each per exec, median of $ROUNDS rounds ($(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
printf '%-34s %10s %10s %10s\n' "per request (us, median)" new base new/base
for k in allowed:1 refused:2; do
  n=$(col new "${k#*:}"); b=$(col base "${k#*:}")
  printf '%-34s %10s %10s %10s\n' "  ${k%%:*}" "$n" "$b" "$(awk -v a="$n" -v b="$b" 'BEGIN{printf "%.2f", a/b}')"
done
echo "rounds, new (allowed refused): $(tr '\n' ';' <"$W/new")"
echo "rounds, base (allowed refused): $(tr '\n' ';' <"$W/base")"
