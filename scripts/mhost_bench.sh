#!/usr/bin/env bash
# The shaped-network measurements of docs/distributed.md: for each link
# profile (fast, slow) and host count (2, 4), hosts made of network
# namespaces (scripts/netns_hosts.sh), then under Open MPI over TCP
#   allreduce_bench: anygrad's MPI group against MPI_Allreduce and
#     MPI_Iallreduce, 4 KiB .. 16 MiB, interleaved rounds
#   mhost_ddp_bench: overlap of backward with bucketed reduction
#   raw TCP (scripts/netns_tcp.py): one stream host 0 -> host 1, and one
#     each way at once, 3 s each: what the path carries under the load
# and the results gathered into one JSON file.
# Usage (root): scripts/mhost_bench.sh BUILD_DIR [out.json] [rounds] [tcp]
#   tcp: only the raw TCP figures, added to an existing out.json
set -euo pipefail
build=$(readlink -f "$1")
out=${2:-docs/numbers/mhost.json}
rounds=${3:-5}
only_tcp=${4:-}
hosts=$(dirname "$(readlink -f "$0")")/netns_hosts.sh
bash "$hosts" check
export AG_BACKEND_PATH=$build/lib AG_DIST_TIMEOUT_MS=120000 OMP_NUM_THREADS=1 AG_NUM_THREADS=1
tmp=$(mktemp -d)
tag=b$$
trap 'bash "$hosts" down "$tag"; rm -rf "$tmp"' EXIT
tcp_py=$(dirname "$hosts")/netns_tcp.py
# Gbit/s of host 0 -> host 1 alone, then of both directions at once (sum / 2)
tcp_probe() { # TAG
  local h0=ag${1}h0 h1=ag${1}h1 a b c
  ip netns exec "$h1" python3 "$tcp_py" recv 5001 >"$tmp/r1" &
  sleep 0.3
  ip netns exec "$h0" python3 "$tcp_py" send 10.213.0.12 5001 3
  wait
  a=$(tail -1 "$tmp/r1")
  ip netns exec "$h1" python3 "$tcp_py" recv 5002 >"$tmp/r1" &
  ip netns exec "$h0" python3 "$tcp_py" recv 5003 >"$tmp/r0" &
  sleep 0.3
  ip netns exec "$h1" python3 "$tcp_py" send 10.213.0.11 5003 3 &
  ip netns exec "$h0" python3 "$tcp_py" send 10.213.0.12 5002 3
  wait
  b=$(tail -1 "$tmp/r1") c=$(tail -1 "$tmp/r0")
  echo "{\"one_way_gbit_s\": $a, \"each_way_gbit_s\": [$b, $c]}"
}
if [ "$only_tcp" = tcp ]; then
  for prof in fast slow; do
    bash "$hosts" up 2 "$prof" "$tag"
    tcp_probe "$tag" | tee "$tmp/$prof.tcp"
    bash "$hosts" down "$tag"
  done
  python3 - "$tmp" "$out" <<'PY'
import json, os, sys, time
tmp, out = sys.argv[1], sys.argv[2]
res = json.load(open(out))
for prof in ("fast", "slow"):
    t = json.loads(open(f"{tmp}/{prof}.tcp").read())
    t["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    t["load"] = os.getloadavg()[0]
    res[f"tcp_{prof}"] = t
json.dump(res, open(out, "w"), indent=1)
print("added the raw TCP figures to", out)
PY
  exit 0
fi
for prof in fast slow; do
  for n in 2 4; do
    bash "$hosts" up "$n" "$prof" "$tag"
    echo "=== $n hosts, $prof: $(cat /run/ag${tag}.shaped)"
    cat /run/ag${tag}.shaped >"$tmp/${prof}_$n.shaped"
    [ "$n" = 2 ] && tcp_probe "$tag" | tee "$tmp/$prof.tcp"
    bash "$hosts" mpi "$tag" "$n" "$build/bin/allreduce_bench" --max-bytes $((16 << 20)) --traffic $((8 << 20)) \
      --rounds "$rounds" --json "$tmp/${prof}_$n.allreduce"
    bash "$hosts" mpi "$tag" "$n" "$build/bin/mhost_ddp_bench" "$tmp/${prof}_$n.ddp" "$rounds"
    bash "$hosts" down "$tag"
  done
done
python3 - "$tmp" "$out" <<'PY'
import json, os, sys, time
tmp, out = sys.argv[1], sys.argv[2]
rate = {"fast": 10.0, "slow": 1.0}
res = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "load": os.getloadavg()[0], "cpus": os.cpu_count(),
                "threads_per_rank": 1}}
for prof in ("fast", "slow"):
    for n in (2, 4):
        k = f"{prof}_{n}"
        ar = {}
        for line in open(f"{tmp}/{k}.allreduce"):
            d = json.loads(line)
            d["anygrad_of_link"] = d["anygrad_busbw_gbps"] * 8 / rate[prof]
            d["best"] = max(("anygrad", d["anygrad_busbw_gbps"]), ("MPI_Allreduce", d["mpi_busbw_gbps"]),
                            ("MPI_Iallreduce", d["mpi_iallreduce_busbw_gbps"]), key=lambda t: t[1])[0]
            ar[str(d["bytes"])] = d
        ddp = [json.loads(l) for l in open(f"{tmp}/{k}.ddp")][-1]
        peak = max(d["anygrad_busbw_gbps"] for d in ar.values())
        res[k] = {"hosts": n, "link_gbit_s": rate[prof], "shaped": open(f"{tmp}/{k}.shaped").read().strip(),
                  "allreduce": ar, "anygrad_peak_busbw_gbit_s": peak * 8,
                  "anygrad_peak_of_link": peak * 8 / rate[prof], "ddp": ddp}
for prof in ("fast", "slow"):
    t = json.loads(open(f"{tmp}/{prof}.tcp").read())
    res[f"tcp_{prof}"] = t
json.dump(res, open(out, "w"), indent=1)
print("wrote", out)
PY
