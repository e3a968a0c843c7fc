#!/bin/sh
# Cost of making a Seatbelt profile per exec (generate + round trip + lint), with 8, 100
# and 1000 hidden paths, side by side with spawning /bin/true. Medians of 51 runs.
set -eu
cd "$(dirname "$0")/.."
exec cargo run -q --release -p capsule-seatbelt --example bench
