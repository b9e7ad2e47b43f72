#!/usr/bin/env python3
"""What only the GPU compilers can say about kernels/gpu, checked on a machine
without a GPU: reads the per-kernel resource reports that the CUDA and HIP
module builds keep next to their objects (<build>/backends/{cuda,hip}/*.o.res:
ptxas -v, hipcc -Rpass-analysis=kernel-resource-usage; see
kernels/gpu/compile_res.sh), for every architecture the build compiles
(AG_CUDA_ARCHS, default sm_80 and sm_90; AG_HIP_ARCHS, default gfx90a and
gfx1030), and fails when a kernel could not launch with the block size it is
launched with, or touches local memory where it is hot:

  NVIDIA (sm_80 and later): registers per thread, allocated in units of 8,
    times the block size must fit the 65,536-register file of an SM, and
    static shared memory must stay within 48 KiB (more needs an opt-in that
    the kernels do not make);
  AMD (CDNA, wave64, 4 SIMDs per CU; RDNA's wave32 is looser): VGPRs + AGPRs
    per lane (units of 8) times the waves of a block that share one SIMD
    must fit its 512 registers per lane, and LDS must stay within 64 KiB;
  hot kernels (HOT: attention, GEMM, elementwise, reductions and softmax,
    cross-entropy, norms, embedding, dropout, optimizers): no stack frame and
    no spill stores or loads (ptxas; the entry's frame and the cumulative
    stack of what it calls), no scratch and no VGPR spills (AMD), on every
    architecture, in every instantiation but f64. A stack frame is per-thread
    local memory: arrays indexed at run time and spilled registers live
    there, at a fraction of the register file's speed.

Printed as notes instead: the same in kernels that are not hot; f64
instantiations (f64 math calls library routines that spill by their calling
convention, and training runs in the other dtypes); AMD SGPR spills (kept in
VGPR lanes, no memory traffic); and the KNOWN exceptions below, each bounded
in bytes so that growth still fails.

Usage: gpu_resources.py <build dir> [--list REGEX]. --list also prints one
line per kernel build whose demangled name matches REGEX (block size,
registers, shared memory, stack, spills, scratch), the table docs/gpu.md
quotes. Exit 0 (also when neither module was built: nothing to check), 1 on
a violation, 2 on a usage error."""
import glob
import math
import os
import re
import subprocess
import sys

# Block sizes the launch sites in kernels/gpu use: 256 threads (AGK_EW_THREADS,
# the reductions' 32x8, GEMM tiles, conv) except the row kernels instantiated
# with 512 threads per row (reduce.cu: ROW_LAUNCH) and attention (SD_NT, 128);
# the first match wins.
BLOCK = [(re.compile(r"^void k_\w+<512, "), 512), (re.compile(r"^void k_sdpa\w*<"), 128)]
DEFAULT_BLOCK = 256
# Kernels on the training step's hot path, by name (the demangled name up to
# its template arguments): attention; GEMM and conv's implicit GEMM;
# elementwise (unary, binary, comparisons, where, fill, dropout); reductions,
# softmax, cross-entropy, variance; layer, RMS and batch norm; embedding;
# the multi-tensor optimizers and the gradient norm's sums.
HOT = re.compile(r"^void (k_sdpa\w*|k_gemm|k_cv_gemm|k_cv_split_sum|k_unary_vec|k_unary_strided|k_binary_vec|"
                 r"k_binary_strided|k_compare|k_where|k_fill|k_fill_vec|k_dropout|k_softmax|k_softmax_bwd|k_xent|"
                 r"k_xent_bwd|k_reduce_\w+|k_var_\w+|k_layernorm\w*|k_rmsnorm\w*|k_bn_\w+|k_embedding\w*|k_multi|"
                 r"k_chunk_sum|k_sumsq_final)(<|\()")
F64 = re.compile(r"\bdouble\b")
# Known local memory in hot kernels: (vendor, name pattern, what, at most
# bytes, why). Within the bound it is a note; above it, a failure.
# None at present: the elementwise kernels' 32-byte frame (CUDA's sinf/cosf
# reduction of |x| > 105615) went with kernels/gpu/trig.cuh.
KNOWN = []
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


def kernel(name, arch):
    return {"name": name, "arch": arch, "regs": 0, "smem": 0, "stack": 0, "spill": 0, "scratch": 0,
            "sgpr_spill": 0, "occupancy": 0}


def parse_ptxas(text):
    """One record per entry function and architecture. A 'Function
    properties' block belongs to the entry only when it names the entry
    (callees get their own blocks)."""
    out, cur, props = [], None, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(\w+)'", line)
        if m:
            cur = kernel(m.group(1), m.group(2))
            out.append(cur)
            props = None
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = m.group(1)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and props == cur["name"]:
            cur["stack"] = max(cur["stack"], int(m.group(1)))
            cur["spill"] = max(cur["spill"], int(m.group(2)) + int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
            s = re.search(r"(\d+) bytes cumulative stack size", line)
            if s:
                cur["stack"] = max(cur["stack"], int(s.group(1)))
    return out


def parse_amd(text):
    """One record per remark block (the architecture is set by
    amd_archs)."""
    out, cur = [], None
    for line in text.splitlines():
        m = re.search(r"remark: Function Name: (\S+)", line)
        if m:
            cur = kernel(m.group(1), "amdgpu")
            out.append(cur)
            continue
        if cur is None:
            continue
        for key, field in (("VGPRs", "regs"), ("AGPRs", "regs"), ("VGPRs Spill", "spill"),
                           ("SGPRs Spill", "sgpr_spill")):
            m = re.search(r"remark:\s+%s: (\d+)" % key, line)
            if m:
                cur[field] += int(m.group(1))
        m = re.search(r"remark:\s+ScratchSize \[bytes/lane\]: (\d+)", line)
        if m:
            cur["scratch"] = int(m.group(1))
        m = re.search(r"remark:\s+Occupancy \[waves/SIMD\]: (\d+)", line)
        if m:
            cur["occupancy"] = int(m.group(1))
        m = re.search(r"remark:\s+LDS Size \[bytes/block\]: (\d+)", line)
        if m:
            cur["smem"] = int(m.group(1))
    return out


def hip_archs(build):
    """AG_HIP_ARCHS of the build's cache, or []."""
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = re.match(r"AG_HIP_ARCHS:\w+=(.*)$", line.strip())
                if m:
                    return [a for a in m.group(1).split(";") if a]
    except OSError:
        pass
    return []


def amd_archs(kernels, archs):
    """hipcc's remarks do not name the target: the driver compiles the
    targets one after the other in sorted order, so the n-th block of a
    kernel in one report is the n-th target. Checked (each kernel once per
    target; no gfx9 block above CDNA's 10 waves per SIMD); if that does not
    hold, the blocks stay 'amdgpu' and the reason is returned."""
    order = sorted(archs)
    seen = {}
    for k in kernels:
        seen.setdefault(k["name"], []).append(k)
    if not order:
        return "AG_HIP_ARCHS not found in the build's CMakeCache.txt"
    for blocks in seen.values():
        if len(blocks) != len(order):
            return "a kernel is reported %d times for %d targets" % (len(blocks), len(order))
        for k, a in zip(blocks, order):
            if a.startswith("gfx9") and k["occupancy"] > 10:
                return "%d waves per SIMD attributed to %s" % (k["occupancy"], a)
    for blocks in seen.values():
        for k, a in zip(blocks, order):
            k["arch"] = a
    return None


def local_memory(k, vendor):
    """(what, bytes) of each kind of local memory a kernel build uses."""
    if vendor == "cuda":
        return [(w, k[f]) for w, f in (("stack", "stack"), ("spill", "spill")) if k[f]]
    return [(w, k[f]) for w, f in (("scratch", "scratch"), ("spill", "spill")) if k[f]]


def base(name):
    """The kernel's name without template arguments and parameters."""
    return re.split(r"[<(]", re.sub(r"^void ", "", name), 1)[0]


def check(kernels, vendor):
    names = demangle(sorted({k["name"] for k in kernels}))
    bad = []
    notes = {}  # (kernel, kind, why) -> [builds, most bytes, architectures]
    sgpr = [0, 0, ""]  # builds, most, where
    worst = {"regs": (0, ""), "smem": (0, ""), "file": (0.0, "")}
    for k in kernels:
        name = names.get(k["name"], k["name"])
        k["demangled"] = name
        block = block_of(name)
        k["block"] = block
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
        hot = HOT.search(name) and not F64.search(name)
        for kind, n in local_memory(k, vendor):
            known = [r for r in KNOWN if r[0] == vendor and r[2] == kind and r[1].search(name)]
            if not hot or (known and n <= known[0][3]):
                why = ("known, at most %d B: %s" % (known[0][3], known[0][4]) if hot else
                       "f64" if HOT.search(name) else "not hot")
                note = notes.setdefault((base(name), kind, why), [0, 0, set()])
                note[0] += 1
                note[1] = max(note[1], n)
                note[2].add(k["arch"])
            else:
                bad.append("%s: %s %d bytes in a hot kernel (local memory)" % (where, kind, n))
        if k["sgpr_spill"]:
            sgpr[0] += 1
            if k["sgpr_spill"] > sgpr[1]:
                sgpr[1], sgpr[2] = k["sgpr_spill"], where
        if k["regs"] > worst["regs"][0]:
            worst["regs"] = (k["regs"], where)
        if k["smem"] > worst["smem"][0]:
            worst["smem"] = (k["smem"], where)
        if used / limit > worst["file"][0]:
            worst["file"] = (used / limit, where)
    lines = ["%s: %s up to %d B in %d builds (%s; %s)" % (kname, kind, most, count, ", ".join(sorted(archs)), why)
             for (kname, kind, why), (count, most, archs) in sorted(notes.items())]
    if sgpr[0]:
        lines.append("SGPR spills to VGPR lanes (no memory traffic) in %d kernel builds, most %d (%s)" %
                     (sgpr[0], sgpr[1], sgpr[2]))
    return bad, lines, worst


def listing(kernels, rx):
    rows = [k for k in kernels if rx.search(k["demangled"])]
    for k in sorted(rows, key=lambda k: (short(k["demangled"]), k["arch"])):
        print("gpu_resources: list: %s [%s]: %d threads, %d registers, %d B shared, stack %d B, spills %d B, "
              "scratch %d B" % (short(k["demangled"]), k["arch"], k["block"], k["regs"], k["smem"], k["stack"],
                                k["spill"], k["scratch"]))


def main(argv):
    args, rx = [], None
    i = 1
    while i < len(argv):
        if argv[i] == "--list" and i + 1 < len(argv):
            try:
                rx = re.compile(argv[i + 1])
            except re.error as e:
                print("gpu_resources: --list: %s" % e, file=sys.stderr)
                return 2
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 1:
        print("usage: gpu_resources.py <build dir> [--list REGEX]", file=sys.stderr)
        return 2
    build = args[0]
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
                ks = parse(fh.read())
            if vendor == "hip":
                why = amd_archs(ks, hip_archs(build))
                if why:
                    print("gpu_resources: hip: note: %s: targets not attributed (%s)" % (os.path.basename(f), why))
            kernels += ks
        if not kernels:
            print("gpu_resources: %s: the reports name no kernels (built without the report flags?)" % vendor)
            failed = True
            continue
        bad, notes, worst = check(kernels, vendor)
        archs = sorted({k["arch"] for k in kernels})
        print("gpu_resources: %s: %d kernel builds for %s; most registers %d (%s); most shared memory %d B (%s); "
              "fullest register file %.0f%% (%s)" % (vendor, len(kernels), ", ".join(archs), worst["regs"][0],
                                                    worst["regs"][1], worst["smem"][0], worst["smem"][1],
                                                    100 * worst["file"][0], worst["file"][1]))
        for n in notes:
            print("gpu_resources: %s: note: %s" % (vendor, n))
        for b in bad:
            print("gpu_resources: %s: FAIL: %s" % (vendor, b))
        if rx:
            listing(kernels, rx)
        failed = failed or bool(bad)
    if not seen:
        return 0
    print("gpu_resources: %s" % ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
