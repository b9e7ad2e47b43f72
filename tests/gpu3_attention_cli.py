#!/usr/bin/env python3
"""scripts/gpu_resources.py's gate on local memory in hot kernels, on
compiler reports written here in the formats of ptxas -v (CUDA 13) and
hipcc -Rpass-analysis=kernel-resource-usage (ROCm 5.2, two targets in one
run), so no GPU compiler is needed. One case per CTest test:

    gpu3_attention_cli.py GPU_RESOURCES_PY WORK_DIR CASE

Exit 0 pass, anything else fails."""
import os
import shutil
import subprocess
import sys

SCRIPT, WORK, CASE = sys.argv[1:4]

# mangled names of kernels in kernels/gpu
SDPA_F32 = "_Z6k_sdpaIfLi64EEvPT_PKS0_S3_S3_S3_Pf7sd_geom"
SDPA_F64 = "_Z6k_sdpaIdLi64EEvPT_PKS0_S3_S3_S3_Pf7sd_geom"
DQ_BF16 = "_Z13k_sdpa_bwd_dqI8agk_bf16Li128EEvPT_PKS1_S4_S4_S4_S4_PKfS4_7sd_geom"
UNARY_F32 = "_Z11k_unary_vecIffLi4E7UnaryOpIffEEvPT_PKT0_xT2_"
TOPK_F32 = "_Z6k_topkIfEvPKT_PS0_Pxxxi"


def ptxas(name, arch, stack=0, spill_st=0, spill_ld=0, regs=64, smem=0, cumulative=None, callee=None):
    """One entry function's lines as ptxas -v prints them."""
    lines = ["ptxas info    : Compiling entry function '%s' for '%s'" % (name, arch)]
    if callee:  # a device function it calls, with its own properties
        lines += ["ptxas info    : Function properties for %s" % callee[0],
                  "    %d bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" % callee[1]]
    lines += ["ptxas info    : Function properties for %s" % name,
              "    %d bytes stack frame, %d bytes spill stores, %d bytes spill loads" % (stack, spill_st, spill_ld)]
    used = "ptxas info    : Used %d registers, used 1 barriers" % regs
    if cumulative is not None:
        used += ", %d bytes cumulative stack size" % cumulative
    lines.append(used + ", %d bytes smem, 520 bytes cmem[0]" % smem)
    return lines


def amd(name, vgprs=40, scratch=0, vgpr_spill=0, occupancy=8, lds=0):
    """One kernel's remark block as hipcc prints it (the target is not named)."""
    loc = "/src/kernels/gpu/attention.cu:98:1: remark: "
    body = ["Function Name: %s" % name, "    SGPRs: 40", "    VGPRs: %d" % vgprs, "    AGPRs: 0",
            "    ScratchSize [bytes/lane]: %d" % scratch, "    Occupancy [waves/SIMD]: %d" % occupancy,
            "    SGPRs Spill: 0", "    VGPRs Spill: %d" % vgpr_spill, "    LDS Size [bytes/block]: %d" % lds]
    return [loc + b + " [-Rpass-analysis=kernel-resource-usage]" for b in body]


def build(cuda=None, hip=None, hip_archs="gfx90a;gfx1030"):
    """A build directory holding the given report lines."""
    shutil.rmtree(WORK, ignore_errors=True)
    for vendor, lines in (("cuda", cuda), ("hip", hip)):
        if lines is None:
            continue
        os.makedirs(os.path.join(WORK, "backends", vendor))
        with open(os.path.join(WORK, "backends", vendor, "%s_attention.o.res" % vendor), "w") as f:
            f.write("\n".join(lines) + "\n")
    with open(os.path.join(WORK, "CMakeCache.txt"), "w") as f:
        f.write("AG_HIP_ARCHS:STRING=%s\n" % hip_archs)
    return WORK


def gate(d, rc, *parts, absent=()):
    p = subprocess.run([sys.executable, SCRIPT, d], capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    if p.returncode != rc:
        print("FAIL: gpu_resources.py exit %d, expected %d\n%s" % (p.returncode, rc, out))
        sys.exit(1)
    for part in parts:
        if part not in out:
            print("FAIL: the output lacks %r:\n%s" % (part, out))
            sys.exit(1)
    for part in absent:
        if part in out:
            print("FAIL: the output has %r:\n%s" % (part, out))
            sys.exit(1)
    return out


def case_stack_frame():
    # the attention kernels of before: the per-thread rows in local memory
    d = build(cuda=ptxas(SDPA_F32, "sm_80", stack=1024) + ptxas(DQ_BF16, "sm_90", stack=1536, cumulative=1536))
    gate(d, 1, "FAIL: void k_sdpa<float, 64> [sm_80]: stack 1024 bytes in a hot kernel",
         "FAIL: void k_sdpa_bwd_dq<agk_bf16, 128> [sm_90]: stack 1536 bytes in a hot kernel")


def case_cumulative_stack():
    # no frame of its own, but what it calls has one
    gate(build(cuda=ptxas(SDPA_F32, "sm_90", cumulative=16)), 1, "[sm_90]: stack 16 bytes in a hot kernel")


def case_spill():
    gate(build(cuda=ptxas(SDPA_F32, "sm_90", stack=16, spill_st=16, spill_ld=24)), 1,
         "[sm_90]: spill 40 bytes in a hot kernel")


def case_callee_not_counted():
    # a callee's frame is its own line, not the entry's
    gate(build(cuda=ptxas(SDPA_F32, "sm_80", callee=("__internal_accurate_pow", 16))), 0, "gpu_resources: ok",
         absent=("FAIL",))


def case_amd_scratch():
    # two targets in one hipcc run: gfx1030's blocks first (sorted order)
    hip = amd(SDPA_F32, occupancy=16) + amd(SDPA_F32, scratch=1040, occupancy=8)
    gate(build(hip=hip), 1, "FAIL: void k_sdpa<float, 64> [gfx90a]: scratch 1040 bytes in a hot kernel",
         absent=("[gfx1030]: scratch",))
    gate(build(hip=amd(SDPA_F32, vgpr_spill=8, scratch=32) + amd(SDPA_F32)), 1,
         "[gfx1030]: scratch 32 bytes", "[gfx1030]: spill 8 bytes")


def case_amd_unattributed():
    # a report whose blocks do not match the targets stays 'amdgpu' and
    # still fails
    hip = amd(SDPA_F32, scratch=64, occupancy=16) + amd(SDPA_F32, occupancy=16)
    gate(build(hip=hip, hip_archs="gfx1030;gfx90a"), 1, "targets not attributed", "[amdgpu]: scratch 64 bytes")


def case_notes():
    # f64 and a kernel off the hot path are notes
    cuda = ptxas(SDPA_F64, "sm_80", stack=40) + ptxas(TOPK_F32, "sm_80", stack=64) + ptxas(UNARY_F32, "sm_90")
    gate(build(cuda=cuda), 0, "note: k_sdpa: stack up to 40 B in 1 builds (sm_80; f64)",
         "note: k_topk: stack up to 64 B in 1 builds (sm_80; not hot)", "gpu_resources: ok")
    # the elementwise kernels have no exception: the 32 bytes of the
    # vendors' sinf/cosf reduction fail (kernels/gpu/trig.cuh replaced them)
    gate(build(cuda=ptxas(UNARY_F32, "sm_80", stack=32)), 1,
         "FAIL: void k_unary_vec<float, float, 4, UnaryOp<float, float> > [sm_80]: stack 32 bytes in a hot kernel")


def case_clean_and_list():
    cuda = ptxas(SDPA_F32, "sm_80", regs=96, smem=29184) + ptxas(DQ_BF16, "sm_90", regs=80, smem=34112)
    hip = amd(SDPA_F32, vgprs=91, lds=29184, occupancy=16) + amd(SDPA_F32, vgprs=103, lds=29184)
    d = build(cuda=cuda, hip=hip)
    p = subprocess.run([sys.executable, SCRIPT, d, "--list", "k_sdpa"], capture_output=True, text=True, timeout=60)
    want = ["cuda: 2 kernel builds for sm_80, sm_90", "hip: 2 kernel builds for gfx1030, gfx90a",
            "list: void k_sdpa<float, 64> [sm_80]: 128 threads, 96 registers, 29184 B shared, stack 0 B, "
            "spills 0 B, scratch 0 B",
            "list: void k_sdpa<float, 64> [gfx90a]: 128 threads, 103 registers, 29184 B shared",
            "gpu_resources: ok"]
    if p.returncode != 0 or any(w not in p.stdout for w in want):
        print("FAIL: exit %d, expected 0 and %r:\n%s%s" % (p.returncode, want, p.stdout, p.stderr))
        sys.exit(1)
    p = subprocess.run([sys.executable, SCRIPT, d, "--list", "("], capture_output=True, text=True, timeout=60)
    if p.returncode != 2:
        print("FAIL: a bad --list pattern: exit %d, expected 2" % p.returncode)
        sys.exit(1)


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}
if CASE not in CASES:
    print("unknown case", CASE)
    sys.exit(2)
CASES[CASE]()
print("PASS", CASE)
