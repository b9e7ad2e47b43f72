#!/usr/bin/python3
"""Writes tests/data/promotion_torch.txt: PyTorch's result dtype for every
pair of anygrad's eight dtypes, as tensors with dims, with the second a
0-dim tensor, and with a Python int / float scalar (torch.result_type).
tests/promotion_test.c checks ag_result_type, ag_result_type_scalar and the
dtype the ops return against it. Run with Debian's python3-torch:
  /usr/bin/python3 tests/promotion_table.py > tests/data/promotion_torch.txt"""
import torch

DT = [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16),
      ("i32", torch.int32), ("f64", torch.float64), ("i64", torch.int64),
      ("bool", torch.bool), ("u8", torch.uint8)]
NAME = {t: n for n, t in DT}

print(f"# torch {torch.__version__}: kind a b result")
for na, ta in DT:
    a = torch.zeros(2, dtype=ta)
    for nb, tb in DT:
        print("dim", na, nb, NAME[torch.result_type(a, torch.zeros(2, dtype=tb))])
        print("zero", na, nb, NAME[torch.result_type(a, torch.zeros((), dtype=tb))])
    print("int", na, "-", NAME[torch.result_type(a, 2)])
    print("float", na, "-", NAME[torch.result_type(a, 0.5)])
