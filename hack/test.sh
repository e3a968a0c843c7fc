#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run runs exactly this).
# Builds the `capsule` binary the end-to-end tests drive, then runs every test of the
# workspace. Sandbox tests run as the current user and, when run as root, again as the
# unprivileged user `capsule-ci` (created by .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && getent passwd "${CAPSULE_TEST_USER:-capsule-ci}" >/dev/null; then
  export CAPSULE_TEST_REQUIRE_USER=1
fi
cargo build --workspace --bins
cargo test --workspace --no-fail-fast -- "$@"
