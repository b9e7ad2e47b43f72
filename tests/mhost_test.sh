#!/usr/bin/env bash
# mhost_test.sh NETNS_HOSTS N PROFILE MPIEXEC MHOST_TEST: tests/mhost_test.c
# on N hosts made of network namespaces (exit 77, the reason on stderr, when
# they cannot be made here), then checks that every rank ran on its own
# host, that each host's link carried the gradients (its veth's counters),
# and that the losses are bit for bit those of the same job in one
# machine's processes.
set -uo pipefail
hosts=$1 n=$2 prof=$3 mpiexec=$4 bin=$5
bash "$hosts" check || exit $?
out=$(bash "$hosts" run "$n" "$prof" -- "$bin" 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "mhost_test.sh: the run across $n hosts failed (exit $rc)"; exit 1; }
names=$(echo "$out" | sed -n 's/^mhost_test: rank [0-9]* of [0-9]* on host \(.*\)$/\1/p' | sort -u | wc -l)
[ "$names" = "$n" ] || { echo "mhost_test.sh: expected $n distinct host names, got $names"; exit 1; }
# A few hundred kB of gradients per host: shared memory would leave the veths idle.
min=200000
hits=0
while read -r tx; do
  [ "$tx" -ge $min ] || { echo "mhost_test.sh: a host sent only $tx bytes on its link (expected >= $min)"; exit 1; }
  hits=$((hits + 1))
done < <(echo "$out" | sed -n 's/^host [0-9]* (.*): tx \([0-9]*\) rx [0-9]* bytes$/\1/p')
[ "$hits" = "$n" ] || { echo "mhost_test.sh: traffic of $hits hosts reported, expected $n"; exit 1; }
bits_net=$(echo "$out" | grep '^mhost_test: bits:')
local_out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpiexec" -np "$n" --oversubscribe "$bin" 2>&1)
rc=$?
bits_local=$(echo "$local_out" | grep '^mhost_test: bits:')
[ $rc = 0 ] || { echo "$local_out"; echo "mhost_test.sh: the run in one machine's processes failed"; exit 1; }
echo "across hosts:    $bits_net"
echo "one machine:     $bits_local"
[ -n "$bits_net" ] && [ "$bits_net" = "$bits_local" ] || {
  echo "mhost_test.sh: the losses across hosts differ from the same job in one machine's processes"
  exit 1
}
echo "mhost_test.sh: $n hosts ($prof): passed"
