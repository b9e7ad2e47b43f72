#!/usr/bin/env python3
"""Which device each rank of `anygrad train --dist mpi` runs on
(docs/distributed.md, "Devices of the ranks"): a backend named without an
index is the local rank's device, one with an index is that device on every
rank, and each rank says where it runs. One case per CTest test:

    gpu3_placement_cli.py ANYGRAD_BINARY WORK_DIR LIBDIR CASE

Exit 0 pass, 77 skipped, anything else fails."""
import os
import shutil
import subprocess
import sys

BIN, WORK, LIBDIR, CASE = sys.argv[1:5]
SKIP = 77
LAUNCHER_VARS = ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                 "LOCAL_RANK"]


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def fresh():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)


def train_args(out):
    return ["train", "--dist", "mpi", "--steps", "2", "--batch", "8", "--hidden", "16", "--emb", "8",
            "--context", "3", "--log-every", "1", "--samples", "0", "--profile", "off", "--threads", "1",
            "--out", os.path.join(WORK, out)]


def run(cmd, env, timeout=120):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        print(f"FAIL: {' '.join(cmd)}: still running after {timeout} s")
        sys.exit(1)


def no_launcher_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(extra)
    return env


def need_gpuemu():
    p = run([BIN, "info"], no_launcher_env(), timeout=60)
    if "gpuemu  2 devices" not in p.stdout:
        print("gpuemu with two devices is not available: skipped")
        sys.exit(SKIP)


def mpirun_or_skip():
    mpirun = shutil.which("mpirun")
    ldd = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    if not mpirun or not os.path.exists(os.path.join(LIBDIR, "libanygrad-mpi.so")) or "libasan" in ldd \
            or "libtsan" in ldd:
        print("mpirun or libanygrad-mpi.so absent, or a sanitizer build: skipped")
        sys.exit(SKIP)
    env = no_launcher_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                          OMPI_MCA_rmaps_base_oversubscribe="1", AG_DIST_TIMEOUT_MS="60000")
    return mpirun, env


def rank_lines(text):
    return sorted(l for l in text.splitlines() if l.startswith("anygrad train: rank "))


def case_local_rank():
    """--device gpuemu (no index) under mpirun -np 2: rank 0 on gpuemu:0 and
    rank 1 on gpuemu:1 (they were both on gpuemu:0), each saying so, with
    the variable its local rank came from; the run trains."""
    need_gpuemu()
    mpirun, env = mpirun_or_skip()
    fresh()
    p = run([mpirun, "-np", "2", BIN] + train_args("local.st") + ["--device", "gpuemu"], env)
    check(p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    lines = rank_lines(p.stdout)
    check(len(lines) == 2, f"expected one line per rank:\n{p.stdout}")
    check(lines[0].startswith("anygrad train: rank 0 of 2 on gpuemu:0 (OMPI_COMM_WORLD_LOCAL_RANK=0, 2 gpuemu"),
          f"rank 0: {lines[0]!r}")
    check(lines[1].startswith("anygrad train: rank 1 of 2 on gpuemu:1 (OMPI_COMM_WORLD_LOCAL_RANK=1, 2 gpuemu"),
          f"rank 1: {lines[1]!r}")
    check("charlm: 2 steps" in p.stdout, f"no end of training:\n{p.stdout}")


def case_named_device():
    """--device gpuemu:1 is that device on every rank."""
    need_gpuemu()
    mpirun, env = mpirun_or_skip()
    fresh()
    p = run([mpirun, "-np", "2", BIN] + train_args("named.st") + ["--device", "gpuemu:1"], env)
    check(p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    lines = rank_lines(p.stdout)
    check(lines == ["anygrad train: rank 0 of 2 on gpuemu:1 (--device gpuemu:1)",
                    "anygrad train: rank 1 of 2 on gpuemu:1 (--device gpuemu:1)"], f"rank lines: {lines}")


def case_no_launcher():
    """Without a launcher's local rank a backend with several devices is a
    usage error naming the variables looked at (before MPI starts); a
    malformed one names the variable; a backend with one device needs
    none."""
    need_gpuemu()
    fresh()
    p = run([BIN] + train_args("none.st") + ["--device", "gpuemu"], no_launcher_env(), timeout=60)
    check(p.returncode == 2, f"exit {p.returncode}, expected 2\n{p.stdout}\n{p.stderr}")
    check("OMPI_COMM_WORLD_LOCAL_RANK" in p.stderr and "--device gpuemu:N" in p.stderr, f"stderr: {p.stderr!r}")
    check(not os.path.exists(os.path.join(WORK, "none.st")), "a checkpoint was written")
    p = run([BIN] + train_args("bad.st") + ["--device", "gpuemu"], no_launcher_env(LOCAL_RANK="1x"), timeout=60)
    check(p.returncode == 2, f"exit {p.returncode}, expected 2\n{p.stdout}\n{p.stderr}")
    check("LOCAL_RANK" in p.stderr and "1x" in p.stderr, f"stderr: {p.stderr!r}")


CASES = {"local_rank": case_local_rank, "named_device": case_named_device, "no_launcher": case_no_launcher}

if __name__ == "__main__":
    if CASE not in CASES:
        print("unknown case", CASE)
        sys.exit(2)
    CASES[CASE]()
    print("PASS", CASE)
