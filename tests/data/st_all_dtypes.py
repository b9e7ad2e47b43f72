"""Every safetensors dtype, written from PyTorch tensors (the bytes are
torch's own), and the check of anygrad's save of what it loaded.
  write <path>   write the file with one tensor per dtype (F8 as raw bytes:
                 torch 1.13 has no float8)
  check <path>   read a file anygrad saved after loading <write>'s output
Run with Debian's /usr/bin/python3 (python3-torch) by tests/safetensors.c."""
import json
import struct
import sys

import torch

NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
         torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
         torch.uint8: "U8", torch.bool: "BOOL"}


def tensors():
    return {
        "f64": torch.tensor([1.5, -2.25, 1e300], dtype=torch.float64),
        "f32": torch.tensor([[1.5, -2.0], [3.25, 4.0]], dtype=torch.float32),
        "f16": torch.tensor([0.5, -1.0, 65504.0], dtype=torch.float16),
        "bf16": torch.tensor([1.0, -3.0, 256.0], dtype=torch.bfloat16),
        "i32": torch.tensor([-7, 2147483647], dtype=torch.int32),
        "position_ids": torch.arange(5, dtype=torch.int64).unsqueeze(0),
        "bn.num_batches_tracked": torch.tensor(123456, dtype=torch.int64),
        "big": torch.tensor([2 ** 40, -3], dtype=torch.int64),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
    }


def raw(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write(path):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    items = [(k, NAMES[v.dtype], list(v.shape), raw(v)) for k, v in tensors().items()]
    items.append(("f8", "F8_E4M3", [2], bytes([0x38, 0x40])))
    for name, dt, shape, b in items:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b" " * (-(8 + len(h)) % 8)  # as the safetensors library pads
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def check(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h, d = json.loads(b[8:8 + n]), b[8 + n:]

    def get(k, dt):
        e = h[k]
        assert e["dtype"] == NAMES[dt], (k, e["dtype"])
        x = torch.frombuffer(bytearray(d[e["data_offsets"][0]:e["data_offsets"][1]]) or bytearray(1),
                             dtype=dt if dt != torch.bfloat16 else torch.int16)
        x = x[: max(1, torch.Size(e["shape"]).numel())] if not e["shape"] else x
        if dt == torch.bfloat16:
            x = x.view(torch.bfloat16)
        return x.reshape(e["shape"])

    src = tensors()
    for k in ("f64", "f32", "f16", "bf16", "i32", "position_ids", "bn.num_batches_tracked", "big", "u8",
              "mask"):
        assert torch.equal(get(k, src[k].dtype), src[k]), k
    # what anygrad converted on load: I16/I8 -> I32
    for k in ("i16", "i8"):
        assert torch.equal(get(k, torch.int32), src[k].to(torch.int32)), k
    print("torch reads anygrad's save of every dtype: ok")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
