#!/usr/bin/env bash
# The out-of-tree backend as a user meets it: listed by `anygrad info` from
# its own folder (AG_BACKEND_PATH), and `anygrad check --backend minihost`
# with the ops it has passing and every other one "unsup", never FAIL.
# Usage: tests/extbackend/check.sh <anygrad CLI> <folder holding libanygrad-minihost.so>
set -euo pipefail
cli=${1:?usage: $0 <anygrad> <module folder>}
export AG_BACKEND_PATH=${2:?usage: $0 <anygrad> <module folder>}
out=$(mktemp -d "${TMPDIR:-/tmp}/anygrad-ext.XXXXXX")
trap 'rm -rf "$out"' EXIT
fail() { echo "extbackend: $*"; exit 1; }

"$cli" info >"$out/info" || fail "anygrad info failed: $(cat "$out/info")"
grep -q '^minihost 1 device' "$out/info" || { cat "$out/info"; fail "anygrad info does not list minihost"; }
grep -q 'out-of-tree example backend' "$out/info" || fail "anygrad info lacks the module's description"
"$cli" info --json >"$out/json" || fail "anygrad info --json failed"
grep -q '"name": "minihost", "available": true' "$out/json" || fail "anygrad info --json lacks minihost"
# priority < 0: never the best device
grep -q '^best device: minihost' "$out/info" && fail "minihost was chosen as the best device"

rc=0
"$cli" check --backend minihost:0 >"$out/check" 2>&1 || rc=$?
tail -n 3 "$out/check"
[ "$rc" -eq 0 ] || { cat "$out/check"; fail "anygrad check --backend minihost exited $rc"; }
summary=$(grep -E '^[0-9]+ pass, [0-9]+ fail, [0-9]+ unsupported$' "$out/check") || fail "no summary line"
read -r pass _ nfail _ unsup _ <<<"$summary"
[ "$nfail" -eq 0 ] || { cat "$out/check"; fail "$nfail FAIL"; }
[ "$pass" -gt 0 ] && [ "$unsup" -gt 0 ] || fail "expected passes and unsupported cases, got: $summary"
# the ops it implements pass
for op in add mul neg sum; do
  grep -qE "^$op +\| pass" "$out/check" || { grep -E "^$op " "$out/check" || true; fail "op $op does not pass"; }
done
# a name nobody provides is a clear usage error
if "$cli" check --backend nosuchbackend:0 >"$out/bad" 2>&1; then fail "an unknown backend name was accepted"; fi
grep -q "no backend 'nosuchbackend'" "$out/bad" || { cat "$out/bad"; fail "unclear message for an unknown backend"; }
echo "extbackend: minihost listed; $summary"
