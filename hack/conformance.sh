#!/bin/bash
# The OCI runtime-tools validation suite (opencontainers/runtime-tools, validation/)
# against capsule-runc, runc and crun, one table of pass/fail per case.
#
#   hack/conformance.sh RT_DIR [RUNTIME...]
#
# RT_DIR: a runtime-tools checkout with `make runtimetest validation-executables` built
# (Go >= 1.19: commit 260e151 builds with Debian 12's go 1.19; later ones need go 1.21).
# RUNTIME: capsule (target/debug/capsule as capsule-runc), runc, crun (default: all).
# crun 1.8 refuses hybrid cgroup hosts; it runs here in a mount namespace without the
# cgroup v2 mount (as tests/tests/oci_export.rs does). Root only. Each case's TAP output
# goes to $OUT/<runtime>/<case>.tap (OUT defaults to /dev/shm/conformance). With capsule
# and runc both run, it then lists what runc passes and capsule-runc does not (the cases,
# then the checks: the `ok` lines of runc's TAP output missing from capsule-runc's).
set -u
rt_dir=${1:?usage: hack/conformance.sh RT_DIR [RUNTIME...]}
shift
runtimes=("$@")
[ ${#runtimes[@]} -eq 0 ] && runtimes=(capsule runc crun)
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/dev/shm/conformance}
mkdir -p "$out/bin"
ln -sf "${CAPSULE_BIN:-$repo/target/debug/capsule}" "$out/bin/capsule-runc"
cat > "$out/bin/crun-hybrid" <<'W'
#!/bin/sh
exec unshare -m sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null; exec crun "$@"' crun "$@"
W
chmod +x "$out/bin/crun-hybrid"
cd "$rt_dir" || exit 1
declare -A result
# cases whose check is that create fails (a value that cannot be mapped, a failing
# prestart hook): they print no TAP line, their status says it
refusal_cases="process_capabilities_fail process_rlimits_fail prestart_fail"
cases=$(ls validation/*/*.t | sort)
for r in "${runtimes[@]}"; do
  case $r in
    capsule) bin=$out/bin/capsule-runc ;;
    crun) bin=$out/bin/crun-hybrid ;;
    *) bin=$(command -v "$r") ;;
  esac
  mkdir -p "$out/$r"
  for t in $cases; do
    name=$(basename "$t" .t)
    RUNTIME=$bin timeout 60 "./$t" > "$out/$r/$name.tap" 2>&1
    rc=$?
    ok=$(grep -c '^ok' "$out/$r/$name.tap")
    bad=$(grep -c '^not ok' "$out/$r/$name.tap")
    skip=$(grep -c '# SKIP' "$out/$r/$name.tap")
    # a case that ends with a failure status failed, whatever its TAP lines say
    # (util.Fatal prints no "not ok": process_capabilities_fail's verdict is its status)
    if [ "$rc" != 0 ]; then result[$r,$name]="FAIL (exit $rc)"
    elif [ "$bad" = 0 ] && [ "$ok" -gt 0 ]; then result[$r,$name]="pass ($ok)"
    elif [ "$ok" = 0 ] && [ "$bad" = 0 ] && [[ " $refusal_cases " == *" $name "* ]] && grep -q 'failed to create' "$out/$r/$name.tap"; then
      result[$r,$name]="pass (refused)"
    elif [ "$ok" = 0 ] && [ "$bad" = 0 ]; then result[$r,$name]="none"
    else result[$r,$name]="FAIL $bad/$((ok+bad))"; fi
    [ "$skip" -gt 0 ] && result[$r,$name]="${result[$r,$name]} skip $skip"
  done
done
printf '| case |'; for r in "${runtimes[@]}"; do printf ' %s |' "$r"; done; echo
printf '|---|'; for r in "${runtimes[@]}"; do printf -- '---|'; done; echo
for t in $cases; do
  name=$(basename "$t" .t)
  printf '| %s |' "$name"
  for r in "${runtimes[@]}"; do printf ' %s |' "${result[$r,$name]}"; done
  echo
done
printf '| **cases passed** |'
for r in "${runtimes[@]}"; do
  n=0
  for t in $cases; do case ${result[$r,$(basename "$t" .t)]} in pass*) n=$((n+1)) ;; esac; done
  printf ' **%s** |' "$n"
done
echo
# the superset check, case by case and check by check: what runc passes and capsule-runc
# does not (the `ok` lines of runc's TAP output missing from capsule-runc's)
if [[ " ${runtimes[*]} " == *" capsule "* && " ${runtimes[*]} " == *" runc "* ]]; then
  echo
  echo "runc passes, capsule-runc fails:"
  for t in $cases; do
    name=$(basename "$t" .t)
    case ${result[runc,$name]} in pass*) case ${result[capsule,$name]} in pass*) ;; *) echo "  case $name" ;; esac ;; esac
    comm -23 <(sed -n 's/^ok [0-9]* - //p' "$out/runc/$name.tap" | sort -u) \
             <(sed -n 's/^ok [0-9]* - //p' "$out/capsule/$name.tap" | sort -u) |
      sed "s/^/  check $name: /"
  done
fi
