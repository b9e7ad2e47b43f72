#!/usr/bin/python3
"""Training-step time of the CLI's jobs on one device: the Fashion-MNIST CNN
(`anygrad train --task fashion-mnist`, batch 128, channels 16,32) and the
text job (`anygrad train --task text`, the default Llama-style model: dim
128, 4 layers, batch 8 x 128 tokens).

Each job runs twice per round, a short and a long run that differ only in
their number of steps; the time per step is the difference of the two
runs' training times over the difference of their steps, so start-up
(device, pipelines, data, the BPE tokenizer) and the evaluations, the same
in both runs, cancel. Wall time is the job's own (the CNN's epoch time, the
text job's "done: N steps in X s"); CPU time is the process's (every thread:
lavapipe's and PoCL's workers included), which a loaded machine does not
inflate. Rounds alternate the order of the two runs; median and range.
A job left out of --jobs keeps its entry in an existing JSON file of the
same device.

Usage:
  bench/train_device.py [--device vulkan:0] [--build build] [--rounds 3]
      [--cnn-steps 2,6] [--text-steps 2,6] [--lp-threads 1] [--threads 1]
      [--jobs cnn,text] [--json docs/numbers/train_vulkan.json]

Threads: AG_NUM_THREADS (--threads), LP_NUM_THREADS and POCL_CPU_MAX_CU_NUM
(--lp-threads), the CNN's loader on the training thread (--workers 0)."""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN_BATCH = 128


def run(cmd, env, pattern):
    """(wall seconds parsed from the output, process CPU seconds)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"train_device.py: {' '.join(cmd)} exited with {p.returncode} after {time.time() - t0:.0f} s:\n"
                 f"{out[-2000:]}")
    m = re.search(pattern, out)
    if not m:
        sys.exit(f"train_device.py: no /{pattern}/ in the output of {' '.join(cmd)}:\n{out[-2000:]}")
    return float(m.group(1)), ru.ru_utime + ru.ru_stime


def job_cmd(exe, job, device, steps, tmp):
    if job == "cnn":
        return [exe, "train", "--task", "fashion-mnist", "--device", device, "--epochs", "1", "--batch",
                str(CNN_BATCH), "--train-limit", str(steps * CNN_BATCH), "--test-limit", "128", "--workers", "0",
                "--profile", "off", "--out", os.path.join(tmp, "cnn.safetensors")], \
            r"epoch 1/1: .*?, ([0-9.]+) s \("
    return [exe, "train", "--task", "text", "--device", device, "--steps", str(steps), "--warmup", "1",
            "--log-every", "100000", "--eval-batches", "1", "--samples", "0",
            "--out", os.path.join(tmp, "text.safetensors")], r"done: \d+ steps in ([0-9.]+) s"


def summary(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": v}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="vulkan:0")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cnn-steps", default="2,6")
    ap.add_argument("--text-steps", default="2,6")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lp-threads", type=int, default=1)
    ap.add_argument("--jobs", default="cnn,text")
    ap.add_argument("--json")
    a = ap.parse_args()
    exe = os.path.join(a.build, "bin", "anygrad")
    if not os.access(exe, os.X_OK):
        sys.exit(f"train_device.py: {exe} missing (cmake --build {a.build} --target anygrad-cli)")
    dev_tag = a.device.replace(":", "")
    out_json = a.json or os.path.join(ROOT, "docs", "numbers", f"train_{dev_tag}.json")
    env = dict(os.environ, AG_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               LP_NUM_THREADS=str(a.lp_threads), POCL_CPU_MAX_CU_NUM=str(a.lp_threads))
    jobs = a.jobs.split(",")
    steps = {"cnn": [int(x) for x in a.cnn_steps.split(",")], "text": [int(x) for x in a.text_steps.split(",")]}
    for j in jobs:
        if j not in steps or len(steps[j]) != 2 or not 0 < steps[j][0] < steps[j][1]:
            sys.exit(f"train_device.py: --jobs cnn,text; --{j}-steps SHORT,LONG with 0 < SHORT < LONG")
    per = {j: {"wall": [], "cpu": []} for j in jobs}
    load = [os.getloadavg()[0]]
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for j in jobs:
                lo, hi = steps[j]
                order = [lo, hi] if r % 2 == 0 else [hi, lo]
                got = {}
                for n in order:
                    cmd, pat = job_cmd(exe, j, a.device, n, tmp)
                    got[n] = run(cmd, env, pat)
                per[j]["wall"].append(1e3 * (got[hi][0] - got[lo][0]) / (hi - lo))
                per[j]["cpu"].append(1e3 * (got[hi][1] - got[lo][1]) / (hi - lo))
                print(f"round {r + 1}/{a.rounds} {j}: {per[j]['wall'][-1]:.0f} ms/step wall, "
                      f"{per[j]['cpu'][-1]:.0f} ms/step CPU ({time.time() - t_start:.0f} s)", flush=True)
            load.append(os.getloadavg()[0])
    what = {"cnn": f"Fashion-MNIST CNN (channels 16,32, batch {CNN_BATCH}, AdamW)",
            "text": "text job (Llama-style, dim 128, 4 layers, batch 8 x 128 tokens, AdamW)"}
    doc = {"bench": "bench/train_device.py", "device": a.device,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "rounds": a.rounds, "threads": a.threads, "lp_threads": a.lp_threads,
           "load_1min": {"min": min(load), "max": max(load)}, "wall_s": round(time.time() - t_start), "jobs": {}}
    for j in jobs:
        w, c = summary(per[j]["wall"]), summary(per[j]["cpu"])
        doc["jobs"][j] = {"what": what[j], "steps": steps[j], "ms_per_step": w, "cpu_ms_per_step": c}
        if j == "cnn":
            doc["jobs"][j]["images_per_s"] = CNN_BATCH * 1e3 / w["median"] if w["median"] > 0 else 0.0
    try:  # jobs not run this time keep their entries (--jobs cnn, then --jobs text)
        with open(out_json) as f:
            old = json.load(f)
        if old.get("device") == a.device:
            for j, v in old.get("jobs", {}).items():
                doc["jobs"].setdefault(j, v)
    except (OSError, ValueError):
        pass
    os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
    with open(out_json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"\n{a.device}: ms per training step, median [min-max] of {a.rounds} rounds, AG_NUM_THREADS={a.threads}, "
          f"LP_NUM_THREADS={a.lp_threads}, load {min(load):.1f}-{max(load):.1f}")
    for j in jobs:
        w, c = doc["jobs"][j]["ms_per_step"], doc["jobs"][j]["cpu_ms_per_step"]
        print(f"{j:5} wall {w['median']:9.1f} [{w['min']:.1f}-{w['max']:.1f}]   CPU {c['median']:9.1f} "
              f"[{c['min']:.1f}-{c['max']:.1f}]   {what[j]}")
    print(f"JSON: {out_json}")


if __name__ == "__main__":
    main()
