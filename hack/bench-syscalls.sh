#!/usr/bin/env bash
# Benchmark: the cost of single syscalls inside a capsule, side by side with bare and
# bwrap (the same policy shape as hack/bench-exec.sh): a C loop (compiled here with cc,
# static) times `getppid`, `open`+`close` of a file six folders deep in the workspace and
# of /usr/lib/.../libc.so.6, `stat` of the workspace file, and `fstat`. Each figure is the
# fastest of 1,000 batches of 200 calls (robust to a busy machine), in ns per call or
# open+close pair. What it shows: what Landlock and the seccomp filter add to the calls a
# command makes (a write `open` would add the supervisor's round trip too; it is left out).
#
# Usage: [BIN=...] [BASE_BIN=...] hack/bench-syscalls.sh [RUNS]   (RUNS default 3)
# Needs cc and bwrap; not a test: run it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
BIN="${BIN:-$(hack/build-release.sh)}"
# shellcheck source=hack/bench-capsule.sh
. hack/bench-capsule.sh syscalls
cat >"$W/ub.c" <<'EOF'
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
#define N 200
#define MIN(body) ({double best=1e18; for(int r=0;r<1000;r++){double t=now(); for(int i=0;i<N;i++){body;} t=(now()-t)/N; if(t<best)best=t;} best;})
int main(int argc,char**argv){
  char f[4096]; snprintf(f,sizeof f,"%s/ub/a/b/c/d/e/file",argv[1]);
  const char *u=argv[2]; struct stat st; int fd;
  printf("| %.0f | %.0f | %.0f | %.0f | %.0f |\n",
    MIN(syscall(SYS_getppid)), MIN(fd=open(f,O_RDONLY|O_CLOEXEC);close(fd)),
    MIN(fd=open(u,O_RDONLY|O_CLOEXEC);close(fd)), MIN(stat(f,&st)), MIN(fstat(0,&st)));
  return 0;
}
EOF
cc -O2 -static -o "$WS/ub" "$W/ub.c"
mkdir -p "$WS/ub/a/b/c/d/e" && echo x >"$WS/ub/a/b/c/d/e/file"
LIBC="$(ldd /bin/sh | awk '/libc.so/ {print $3}')"
echo "| variant | getppid | open+close, workspace file 6 deep | open+close, $LIBC | stat, workspace file | fstat |"
echo "|---|---|---|---|---|---|"
for _ in $(seq "$RUNS"); do
  echo "| bare $(cd "$WS" && ./ub "$WS" "$LIBC")"
  echo "| bwrap $("${BWRAP[@]}" ./ub "$WS" "$LIBC")"
  echo "| capsule $(cd "$WS" && "$BIN" exec --quiet-refusals bench -- ./ub "$WS" "$LIBC")"
  if [ -n "${BASE_BIN:-}" ]; then
    echo "| BASE capsule $(cd "$WS" && "$BASE_BIN" exec --quiet-refusals bench -- ./ub "$WS" "$LIBC")"
  fi
done
