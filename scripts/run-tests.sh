#!/bin/sh
# make test / make test-long: ctest in BUILD with the arguments given, then the ten slowest tests
# of this run with their times, the wall time and the machine (ctest's own log in BUILD/ctest.log).
#   scripts/run-tests.sh BUILD [ctest arguments...]
# One test: scripts/run-tests.sh build -R '^device_staged$'   One label: ... -L unit
set -u
BUILD="$1"; shift
t0=$(date +%s)
cd "$BUILD" || exit 1
ctest --output-on-failure --output-log ctest.log "$@"
rc=$?
t1=$(date +%s)
echo "== the ten slowest tests of this run (seconds) =="
grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' ctest.log \
  | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [ .*]+(\**[A-Za-z]+)[^0-9]*([0-9.]+) sec.*/\3 \1 \2/' \
  | sort -rn | head -10 | awk '{printf "%9.1f  %-34s %s\n", $1, $2, $3}'
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "wall time $((t1 - t0)) s on $(nproc) CPUs ($cpu)"
exit $rc
