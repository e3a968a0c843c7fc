#!/usr/bin/env bash
# Build `capsule` the way it is meant to run: the release profile and, on Linux with glibc,
# statically linked as a static-pie (ASLR kept). Prints the binary's path; with --install,
# copies it to ${CARGO_HOME:-~/.cargo}/bin/capsule too, and installs its man pages into
# ${XDG_DATA_HOME:-~/.local/share}/man/man1 and its completions for bash, zsh and fish
# into those shells' user folders (docs/cli.md lists them), printing each path.
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
#
# The functions an exec runs are linked together at the start of the code, in the order
# of hack/exec-order.txt (lld's --symbol-ordering-file; lld is Rust's linker on
# x86_64-unknown-linux-gnu): a warm `exec -- /bin/true` then takes ~50 fewer page faults
# and ~0.3 ms less (hack/exec-order.sh says how the file is made; `--check` how stale it is). It is passed as a copy
# named after its digest, so that a new order is a new RUSTFLAGS and cargo links again.
# Where that link fails (another linker; a checkout path with spaces, which RUSTFLAGS
# cannot carry), the default order is used, said on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
host="$(rustc -vV | sed -n 's/^host: //p')"
static_build() {
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static $1" \
    cargo build --release -q -p capsule-runtime --target "$host"
}
order_flags=""
if [ "$host" = x86_64-unknown-linux-gnu ] && [ -f hack/exec-order.txt ]; then
  order="$PWD/target/exec-order-$(sha256sum hack/exec-order.txt | cut -c1-16).txt"
  mkdir -p target
  [ -f "$order" ] || cp hack/exec-order.txt "$order"
  order_flags="-C link-arg=-Wl,--symbol-ordering-file=$order -C link-arg=-Wl,--no-warn-symbol-ordering"
fi
case "$host" in
  *-linux-gnu)
    built=0
    if [ -n "$order_flags" ]; then
      if static_build "$order_flags"; then
        built=1
      else
        echo "hack/build-release.sh: the build linking in hack/exec-order.txt's order failed; trying the default order" >&2
      fi
    fi
    if [ "$built" = 0 ] && static_build ""; then
      built=1
    fi
    if [ "$built" = 1 ]; then
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
  # the man pages and shell completions, made by the binary just installed from its own
  # command line (`capsule man DIR`, `capsule completions SHELL`), into the user's
  # directories that man and the shells search
  data="${XDG_DATA_HOME:-$HOME/.local/share}"
  config="${XDG_CONFIG_HOME:-$HOME/.config}"
  man1="$data/man/man1"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$dest/capsule" man "$tmp/man1" >/dev/null
  mkdir -p "$man1"
  install -m 0644 "$tmp"/man1/*.1 "$man1/"
  echo "$man1/capsule.1 (and $(($(ls "$tmp"/man1/*.1 | wc -l) - 1)) pages of its subcommands)"
  for shell in bash zsh fish; do
    case "$shell" in
      bash) to="$data/bash-completion/completions/capsule" ;;  # bash-completion loads it on demand
      zsh) to="$data/zsh/site-functions/_capsule" ;;           # needs that folder in fpath, see docs/cli.md
      fish) to="$config/fish/completions/capsule.fish" ;;      # fish loads it on demand
    esac
    "$dest/capsule" completions "$shell" >"$tmp/$shell"
    mkdir -p "$(dirname "$to")"
    install -m 0644 "$tmp/$shell" "$to"
    echo "$to"
  done
  if command -v man >/dev/null && ! man -w capsule >/dev/null 2>&1; then
    echo "hack/build-release.sh: man does not search $data/man yet: add ~/.local/bin to PATH, or export MANPATH=\"$data/man:\$(manpath)\"" >&2
  fi
else
  echo "$bin"
fi
