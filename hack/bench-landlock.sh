#!/bin/sh
# Cost of the Landlock layer per exec: building the ruleset from a policy (opening every
# entry on the way to hidden paths) and enforcing it in a forked child, with 0, 20 and 200
# hidden sibling projects. Medians of 51 runs each, release build. The cost must not grow
# much with the number of hidden paths (target: 200 hidden paths add under 1 ms).
set -eu
cd "$(dirname "$0")/.."
cargo test -q --release -p capsule-runtime --lib bench_hidden_paths -- --ignored --nocapture 2>&1 |
  grep -E 'landlock|build only'
