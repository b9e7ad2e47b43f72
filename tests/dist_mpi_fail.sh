#!/bin/sh
# A peer that never arrives, or dies, must not hang the MPI group
# (docs/distributed.md, "A peer dies"). Usage: dist_mpi_fail.sh MPIEXEC EXE MODE
#   never-arrive: rank 1 of 2 skips a collective; rank 0 must report
#                 AG_ERR_TIMEOUT (2 s group timeout) and the job end nonzero.
#   kill:         rank 1 of 3 is killed (SIGKILL) before a collective.
#                 Default mpirun: the job must end promptly, nonzero.
#                 mpirun --enable-recovery: ranks 0 and 2 must each report
#                 AG_ERR_TIMEOUT within the timeout, and the job end.
set -u
MPIEXEC=$1 EXE=$2 MODE=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; echo "---- output:"; cat "$out"; exit 1; }

run() { # run LIMIT_S ARGS...: sets rc and secs
  limit=$1; shift
  t0=$(date +%s)
  timeout "$limit" "$MPIEXEC" "$@" >"$out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  [ $rc -eq 124 ] && fail "hung: still running after ${limit} s ($*)"
  return 0
}

case "$MODE" in
never-arrive)
  run 60 -np 2 "$EXE" never-arrive
  grep -q "rank 0: all_reduce -> AG_ERR_TIMEOUT" "$out" || fail "rank 0 did not report AG_ERR_TIMEOUT"
  grep -q "never called it" "$out" || fail "the timeout message does not say why"
  [ $rc -ne 0 ] || fail "mpirun exited 0"
  ;;
kill)
  run 60 -np 3 --oversubscribe "$EXE" kill
  [ $rc -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
  run 60 -np 3 --oversubscribe --enable-recovery "$EXE" kill
  for r in 0 2; do
    grep -q "rank $r: all_reduce -> AG_ERR_TIMEOUT" "$out" || fail "survivor rank $r did not report AG_ERR_TIMEOUT"
  done
  ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac
echo "ok: $MODE (mpirun exit $rc after ${secs} s)"
