#!/usr/bin/env bash
# The shaped-network measurements of docs/distributed.md: for each link
# profile (fast, slow) and host count (2, 4), hosts made of network
# namespaces (scripts/netns_hosts.sh), then under Open MPI over TCP
#   allreduce_bench: anygrad's MPI group against MPI_Allreduce and
#     MPI_Iallreduce, 4 KiB .. 16 MiB, interleaved rounds
#   mhost_ddp_bench: overlap of backward with bucketed reduction
# and the results gathered into one JSON file.
# Usage (root): scripts/mhost_bench.sh BUILD_DIR [out.json] [rounds]
set -euo pipefail
build=$(readlink -f "$1")
out=${2:-docs/numbers/mhost.json}
rounds=${3:-5}
hosts=$(dirname "$(readlink -f "$0")")/netns_hosts.sh
bash "$hosts" check
export AG_BACKEND_PATH=$build/lib AG_DIST_TIMEOUT_MS=120000 OMP_NUM_THREADS=1 AG_NUM_THREADS=1
tmp=$(mktemp -d)
tag=b$$
trap 'bash "$hosts" down "$tag"; rm -rf "$tmp"' EXIT
for prof in fast slow; do
  for n in 2 4; do
    bash "$hosts" up "$n" "$prof" "$tag"
    echo "=== $n hosts, $prof: $(cat /run/ag${tag}.shaped)"
    cat /run/ag${tag}.shaped >"$tmp/${prof}_$n.shaped"
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
json.dump(res, open(out, "w"), indent=1)
print("wrote", out)
PY
