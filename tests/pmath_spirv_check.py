#!/usr/bin/env python3
"""The SPIR-V of pmath.h compiled as GLSL keeps the library's promises:
every float multiply, add and subtract is decorated NoContraction (so no
driver may fuse them), there is no OpFDiv (division is built), and the only
GLSL.std.450 instructions are the exact ones (Floor, Ceil, Trunc,
RoundEven, FAbs).
  pmath_spirv_check.py <glslc> <include dir> <shader.comp>"""
import re
import subprocess
import sys

EXACT = {"Floor", "Ceil", "Trunc", "RoundEven", "FAbs"}


def main():
    glslc, inc, src = sys.argv[1:4]
    asm = subprocess.run([glslc, "-S", "-fshader-stage=comp", "--target-env=vulkan1.1", "-I" + inc, src, "-o", "-"],
                         check=True, capture_output=True, text=True).stdout
    precise = set(re.findall(r"OpDecorate (%\w+) NoContraction", asm))
    arith = re.findall(r"(%\w+) = (OpFMul|OpFAdd|OpFSub) ", asm)
    loose = [a for a in arith if a[0] not in precise]
    divs = re.findall(r"= OpFDiv ", asm)
    ext = set(re.findall(r"OpExtInst %\w+ %\w+ (\w+)", asm)) - EXACT
    print(f"{len(arith)} float + - *, {len(loose)} without NoContraction; {len(divs)} OpFDiv; inexact built-ins: {sorted(ext)}")
    return 1 if loose or divs or ext else 0


if __name__ == "__main__":
    sys.exit(main())
