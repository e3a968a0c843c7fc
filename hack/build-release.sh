#!/usr/bin/env bash
# Build `capsule` the way it is meant to run: the release profile and, on Linux with glibc,
# statically linked as a static-pie (ASLR kept). Prints the binary's path; with --install,
# copies it to ${CARGO_HOME:-~/.cargo}/bin/capsule too.
#
# Why static: a dynamically linked capsule spends ~0.3 ms of every start in the dynamic
# loader (mapping and relocating libc, libm and libgcc_s; `hack/bench-exec.sh` runs
# thousands of starts), and a static one ignores LD_PRELOAD and LD_LIBRARY_PATH, so an
# environment cannot load code into the tool that sets up the sandbox. glibc's `files`
# and `dns` lookups (users, /etc/hosts, DNS for the allowlist proxy) are built into its
# static libc; NSS modules beyond those (e.g. `systemd` in nsswitch.conf) are skipped.
#
# `--target` keeps the static flag off build scripts and proc-macros (which must stay
# dynamic); the binary lands in target/<host>/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
host="$(rustc -vV | sed -n 's/^host: //p')"
case "$host" in
  *-linux-gnu)
    if RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
      cargo build --release -q -p capsule-runtime --target "$host"; then
      bin="$PWD/target/$host/release/capsule"
    else
      # static glibc (libc.a) comes with libc6-dev (Debian, Ubuntu) or glibc-static (Fedora)
      echo "hack/build-release.sh: the static build failed (libc6-dev or glibc-static missing?); building a dynamically linked capsule instead" >&2
      cargo build --release -q -p capsule-runtime
      bin="$PWD/target/release/capsule"
    fi
    ;;
  *)
    cargo build --release -q -p capsule-runtime
    bin="$PWD/target/release/capsule"
    ;;
esac
if [ "${1:-}" = --install ]; then
  dest="${CARGO_HOME:-$HOME/.cargo}/bin"
  mkdir -p "$dest"
  install -m 0755 "$bin" "$dest/capsule"
  echo "$dest/capsule"
else
  echo "$bin"
fi
