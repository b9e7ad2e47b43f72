#!/usr/bin/env python3
"""What only the GPU compilers can say about kernels/gpu, checked on a machine
without a GPU: reads the per-kernel resource reports that the CUDA and HIP
module builds keep next to their objects (<build>/backends/{cuda,hip}/*.o.res:
ptxas -v, hipcc -Rpass-analysis=kernel-resource-usage; see
kernels/gpu/compile_res.sh) and fails when a kernel could not launch with the
block size it is launched with, or spills where it is hot:

  NVIDIA (sm_80 and later): registers per thread, allocated in units of 8,
    times the block size must fit the 65,536-register file of an SM, and
    static shared memory must stay within 48 KiB (more needs an opt-in that
    the kernels do not make);
  AMD (CDNA, wave64, 4 SIMDs per CU): VGPRs + AGPRs per lane (units of 8)
    times the waves of a block that share one SIMD must fit its 512 registers
    per lane, and LDS must stay within 64 KiB;
  both: no register spills to memory (ptxas spill stores/loads, AMD VGPR
    spills) in the f32/f16/bf16 instantiations of the kernels listed in HOT.
    f64 instantiations and AMD SGPR spills (kept in VGPR lanes, no memory
    traffic) are listed as notes: f64 math calls library routines whose
    calling convention spills, and training runs in the other dtypes.

Usage: gpu_resources.py <build dir>. Exit 0 (also when neither module was
built: nothing to check), 1 on a violation."""
import glob
import math
import os
import re
import subprocess
import sys

# Block sizes the launch sites in kernels/gpu use: 256 threads (AGK_EW_THREADS,
# the reductions' 32x8, GEMM tiles, conv) except the row kernels instantiated
# with 512 threads per row (reduce.cu: ROW_LAUNCH); the first match wins.
BLOCK = [(re.compile(r"^void k_\w+<512, "), 512)]
DEFAULT_BLOCK = 256
# Kernels on the training step's hot path: a spill there fails the check.
HOT = re.compile(r"^void (k_gemm|k_cv_gemm|k_unary_vec|k_binary_vec|k_fill_vec|k_softmax|k_softmax_bwd|k_xent|"
                 r"k_xent_bwd|k_layernorm|k_layernorm_bwd|k_rmsnorm|k_rmsnorm_bwd|k_reduce_rows|k_reduce_cols|"
                 r"k_embedding|k_embedding_bwd|k_multi|k_dropout)<")
NV_REGS, NV_SMEM = 65536, 48 * 1024
AMD_VGPRS, AMD_LDS = 512, 64 * 1024


def demangle(names):
    if not names:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short(name):
    """The name without its parameter list."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def block_of(name):
    for rx, b in BLOCK:
        if rx.search(name):
            return b
    return DEFAULT_BLOCK


def parse_ptxas(text):
    """(kernel, arch, regs, smem, spill bytes) per entry function."""
    out, cur = [], None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(\w+)'", line)
        if m:
            cur = {"name": m.group(1), "arch": m.group(2), "regs": 0, "smem": 0, "spill": 0, "sgpr_spill": 0}
            out.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["spill"] = max(cur["spill"], int(m.group(1)) + int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    return out


def parse_amd(text):
    """(kernel, regs = VGPRs + AGPRs, LDS bytes, spills) per remark block."""
    out, cur = [], None
    for line in text.splitlines():
        m = re.search(r"remark: Function Name: (\S+)", line)
        if m:
            cur = {"name": m.group(1), "arch": "amdgpu", "regs": 0, "smem": 0, "spill": 0, "sgpr_spill": 0}
            out.append(cur)
            continue
        if cur is None:
            continue
        for key, field in (("VGPRs", "regs"), ("AGPRs", "regs")):
            m = re.search(r"remark:\s+%s: (\d+)" % key, line)
            if m:
                cur[field] += int(m.group(1))
        m = re.search(r"remark:\s+VGPRs Spill: (\d+)", line)
        if m:
            cur["spill"] += int(m.group(1))
        m = re.search(r"remark:\s+SGPRs Spill: (\d+)", line)
        if m:
            cur["sgpr_spill"] += int(m.group(1))
        m = re.search(r"remark:\s+LDS Size \[bytes/block\]: (\d+)", line)
        if m:
            cur["smem"] = int(m.group(1))
    return out


def check(kernels, vendor):
    names = demangle(sorted({k["name"] for k in kernels}))
    bad, warn = [], []
    worst = {"regs": (0, ""), "smem": (0, ""), "file": (0.0, "")}
    for k in kernels:
        name = names.get(k["name"], k["name"])
        block = block_of(name)
        if vendor == "cuda":
            used = math.ceil(k["regs"] / 8) * 8 * block
            limit, smem_limit = NV_REGS, NV_SMEM
            what = "%d registers x %d threads = %d > %d" % (k["regs"], block, used, limit)
        else:
            waves_per_simd = math.ceil(math.ceil(block / 64) / 4)
            used = math.ceil(k["regs"] / 8) * 8 * waves_per_simd
            limit, smem_limit = AMD_VGPRS, AMD_LDS
            what = "%d VGPRs x %d waves per SIMD (%d threads) = %d > %d" % (k["regs"], waves_per_simd, block, used,
                                                                           limit)
        where = "%s [%s]" % (short(name), k["arch"])
        if used > limit:
            bad.append("%s: %s" % (where, what))
        if k["smem"] > smem_limit:
            bad.append("%s: %d bytes of static shared memory > %d" % (where, k["smem"], smem_limit))
        hot = HOT.search(name) and not re.search(r"\bdouble\b", name)
        if k["spill"]:
            (bad if hot else warn).append("%s: spills to memory (%d)" % (where, k["spill"]))
        if k["sgpr_spill"]:
            warn.append("%s: SGPR spills to VGPR lanes (%d)" % (where, k["sgpr_spill"]))
        if k["regs"] > worst["regs"][0]:
            worst["regs"] = (k["regs"], where)
        if k["smem"] > worst["smem"][0]:
            worst["smem"] = (k["smem"], where)
        if used / limit > worst["file"][0]:
            worst["file"] = (used / limit, where)
    return bad, warn, worst


def main():
    if len(sys.argv) != 2:
        print("usage: gpu_resources.py <build dir>", file=sys.stderr)
        return 2
    build = sys.argv[1]
    failed = False
    seen = False
    for vendor, parse in (("cuda", parse_ptxas), ("hip", parse_amd)):
        files = sorted(glob.glob(os.path.join(build, "backends", vendor, "*.o.res")))
        if not files:
            print("gpu_resources: %s: no resource reports (module not built): skipped" % vendor)
            continue
        seen = True
        kernels = []
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as fh:
                kernels += parse(fh.read())
        if not kernels:
            print("gpu_resources: %s: the reports name no kernels (built without the report flags?)" % vendor)
            failed = True
            continue
        bad, warn, worst = check(kernels, vendor)
        print("gpu_resources: %s: %d kernel builds; most registers %d (%s); most shared memory %d B (%s); "
              "fullest register file %.0f%% (%s)" % (vendor, len(kernels), worst["regs"][0], worst["regs"][1],
                                                    worst["smem"][0], worst["smem"][1], 100 * worst["file"][0],
                                                    worst["file"][1]))
        for w in warn:
            print("gpu_resources: %s: note: %s" % (vendor, w))
        for b in bad:
            print("gpu_resources: %s: FAIL: %s" % (vendor, b))
        failed = failed or bool(bad)
    if not seen:
        return 0
    print("gpu_resources: %s" % ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
