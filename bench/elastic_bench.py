#!/usr/bin/python3
"""Elastic restart of `anygrad launch` (docs/distributed.md, "Elastic runs"):
the kill case of tests/elastic_cli.py, ROUNDS times. Three hosts reached
through the test agent (on this machine), the charlm MLP (hidden 64, global
batch 48, 400 steps, a checkpoint every 20, 1 thread per rank, equal
shares); once rank 1 has done step K (K = 60 + 4 r in round r, so the kill
falls at different points of the checkpoint interval) its host is marked
dead and its process killed (SIGKILL). Per round: the time from the kill to
mpirun's exit (the failure detected), to the restart's mpirun starting
(probe and checkpoint snapshot) and to the first step done by the 2 ranks
of the restart (training again); the steps lost (the last step reached less
the checkpoint's); and whether the final checkpoint equals, byte for byte,
a fresh 2-rank run from the same checkpoint. Median and range over rounds;
table on stdout, JSON to the file.

With --netns (root, network namespaces): the `down` case of
tests/elastic_netns.py instead, ROUNDS times, each on 3 fresh hosts made of
network namespaces (scripts/netns_hosts.sh, Open MPI over TCP, no shaping):
after rank 1's step K (as above) the link of its host goes down; the times
are from that moment to the failure's detection (--stall-timeout 3 ending
the attempt), to the restart's mpirun (ending the stalled mpirun, the probe
with the agent's 2 s connect timeout) and to training again on the 2
survivors.

Usage: bench/elastic_bench.py [--anygrad build/bin/anygrad] [--mpirun mpirun] [--rounds 5] [--netns] [--json FILE]"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests"))
import elastic_cli  # noqa: E402


def machine():
    model = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%s, %d CPUs" % (model, os.cpu_count() or 0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anygrad", default=os.path.join(here, "..", "build", "bin", "anygrad"))
    p.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--netns", action="store_true", help="a host's link taken down, across namespace hosts")
    p.add_argument("--json")
    o = p.parse_args()
    if o.netns:
        import elastic_netns
        hosts = os.path.join(here, "..", "scripts", "netns_hosts.sh")
        if os.system("bash %s check" % hosts) != 0:
            sys.exit("elastic_bench: namespace hosts cannot be made here")
    load0 = os.getloadavg()[0]
    rows = []
    work = tempfile.mkdtemp(prefix="elastic_bench_")
    try:
        for r in range(o.rounds):
            w = os.path.join(work, "r%d" % r)
            os.makedirs(w)
            if o.netns:
                rows.append(elastic_netns.with_hosts(
                    os.path.abspath(hosts), lambda tag: elastic_netns.link_run(
                        os.path.abspath(hosts), os.path.abspath(o.anygrad), o.mpirun, w, tag, down_at=60 + 4 * r)))
            else:
                rows.append(elastic_cli.kill_run(os.path.abspath(o.anygrad), o.mpirun, w, kill_at=60 + 4 * r))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    keys = ["kill_to_detected_s", "detected_to_restart_s", "restart_to_training_s", "kill_to_training_s",
            "steps_lost"]
    if o.netns:
        keys = ["down_to_detected_s", "detected_to_restart_s", "restart_to_training_s", "down_to_training_s",
                "steps_lost"]
    metrics = {}
    print("%-24s %10s %10s %10s" % ("metric", "median", "min", "max"))
    for k in keys:
        v = [x[k] for x in rows]
        metrics[k] = {"median": statistics.median(v), "min": min(v), "max": max(v), "values": v}
        print("%-24s %10.3f %10.3f %10.3f" % (k, metrics[k]["median"], metrics[k]["min"], metrics[k]["max"]))
    equal = sum(1 for x in rows if x["bitwise_equal"])
    print("final checkpoint equal to the fresh 2-rank run: %d of %d rounds" % (equal, len(rows)))
    out = {"rounds": len(rows), "bitwise_equal_rounds": equal, "metrics": metrics, "rows": rows,
           "machine": machine(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "load": round(max(load0, os.getloadavg()[0]), 1), "checkpoint_every": elastic_cli.SAVE_EVERY,
           "steps": elastic_cli.STEPS, "threads_per_rank": 1,
           "scenario": "link down, namespace hosts, --stall-timeout 3" if o.netns else "SIGKILL, test agent hosts"}
    if o.json:
        with open(o.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
