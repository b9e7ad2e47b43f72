#!/bin/sh
# Runs a GPU compiler and keeps its per-kernel resource report: nvcc's
# ptxas -v lines or hipcc's kernel-resource-usage remarks go to the file $1
# (read by scripts/gpu_resources.py); every other line of the compiler's
# stderr (warnings, errors) still goes to stderr. Exit status: the
# compiler's. Usage: compile_res.sh <report> <compiler> <args...>
res=$1
shift
tmp=$res.stderr
"$@" 2>"$tmp"
rc=$?
# a remark is followed by the source line and a caret: skip those too
awk -v res="$res" '
  /^ptxas info|bytes stack frame/ { print > res; next }
  /remark: .*kernel-resource-usage/ { print > res; skip = 1; next }
  skip && !/^[^ ]+:[0-9]+:[0-9]+: / { next }
  { skip = 0; print > "/dev/stderr" }
' "$tmp"
[ -f "$res" ] || : >"$res"
rm -f "$tmp"
exit $rc
