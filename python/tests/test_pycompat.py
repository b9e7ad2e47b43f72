"""The PyTorch-compatibility harness (tests/python/compat): the import hook
that loads anygrad for `import torch`, the runner's comparison, its table,
exit status and crash recovery; and F.linear's dtype under autocast, as
torch's."""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import anygrad as ag

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPAT = os.path.join(ROOT, "tests", "python", "compat")
sys.path.insert(0, COMPAT)
import run_compat  # noqa: E402


def _shim_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(COMPAT, "shim") + os.pathsep + os.path.join(ROOT, "python")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_shimmed(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_shim_env(),
                          capture_output=True, text=True, timeout=120)


def test_shim_maps_torch_to_anygrad_modules():
    p = _run_shimmed("""
        import sys, json
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        import torch.optim.lr_scheduler as sched
        from torch.utils.data import DataLoader, TensorDataset
        import anygrad, anygrad.utils.data
        out = {
            "tensor": torch.Tensor is anygrad.Tensor,
            "nn": nn.Linear is anygrad.nn.Linear,
            "F": F.relu is anygrad.functional.relu,
            "sched": sched.StepLR is anygrad.lr_scheduler.StepLR,
            "optim": torch.optim.SGD is anygrad.optim.SGD,
            "loader": DataLoader is anygrad.utils.data.DataLoader,
            "anygrad_untouched": type(anygrad.nn).__name__ == "module"
                                 and anygrad.nn.__name__ == "anygrad.nn",
            "no_real_torch": "torch._C" not in sys.modules,
            "value": torch.ones(2, 3).sum().item(),
        }
        print(json.dumps(out))
    """)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out.pop("value") == 6.0
    assert all(out.values()), out


def test_shim_refuses_a_torch_module_anygrad_lacks():
    p = _run_shimmed("""
        try:
            import torch.no_such_module
        except ModuleNotFoundError as e:
            print("refused", e.name)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "refused torch.no_such_module"


def test_shim_off_leaves_torch_alone(th):
    env = _shim_env()
    env["ANYGRAD_SHIM_OFF"] = "1"
    p = subprocess.run([sys.executable, "-c", "import torch; print(torch.__name__, hasattr(torch, '_C'))"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["torch", "True"]


@pytest.mark.parametrize("a,b,ok", [
    ({"x": [1.0, 2.0]}, {"x": [1.0, 2.00001]}, True),
    ({"x": [1.0, 2.0]}, {"x": [1.0, 2.1]}, False),
    ({"x": [1.0, 2.0]}, {"x": [1.0]}, False),
    ({"x": 1.0}, {"y": 1.0}, False),
    ({"x": True}, {"x": 1}, False),
    ({"x": 3}, {"x": 3.0}, True),
    ({"x": "abc"}, {"x": "abd"}, False),
    ({"x": float("nan")}, {"x": float("nan")}, True),
    ({"x": float("nan")}, {"x": 0.0}, False),
    ({"x": float("inf")}, {"x": 1e30}, False),
    ({"x": [[1.0], [2.0]]}, {"x": [[1.0], 2.0]}, False),
])
def test_compare(a, b, ok):
    d, why = run_compat.compare(a, b, 1e-4, 1e-5)
    assert (why is None) == ok, why


def test_compare_reports_max_diff_and_where():
    d, why = run_compat.compare({"l": [1.0, 2.0, 3.0]}, {"l": [1.0, 2.5, 3.25]}, 1e-4, 1e-5)
    assert d == pytest.approx(0.5)
    assert why.startswith("l[1]: 2 vs 2.5")


def test_runner_table_exit_status_and_crash_recovery(tmp_path, th):
    progs = {
        "a_match.py": "import json, torch\nprint(json.dumps({'s': torch.ones(3).sum().item()}))\n",
        "b_raises.py": "import torch\ntorch.this_does_not_exist(1)\n",
        "c_crash.py": "import os, torch\nos._exit(3)\n",
        "d_differs.py": ("# compat: rtol=0 atol=0\nimport json, torch\n"
                         "print(json.dumps({'n': len(str(torch.float32))}))\n"),
        "e_after_crash.py": "import json, torch\nprint(json.dumps({'v': torch.zeros(2).tolist()}))\n",
    }
    for k, v in progs.items():
        (tmp_path / k).write_text(v)
    out = tmp_path / "r.json"
    cmd = [sys.executable, os.path.join(COMPAT, "run_compat.py"), "--dir", str(tmp_path), "--json", str(out)]
    p = subprocess.run(cmd + ["--min", "2"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr  # torch itself fails b_raises and c_crash
    r = json.loads(out.read_text())
    rows = {x["program"]: x for x in r["programs"]}
    assert r["passed"] == 2 and r["total"] == 5
    assert rows["a_match"]["ok"] and rows["e_after_crash"]["ok"]
    assert rows["b_raises"]["why"].startswith("torch run failed: AttributeError")
    assert "b_raises.py:2" in rows["b_raises"]["why"]
    assert "process died: exit status 3" in rows["c_crash"]["why"]
    assert rows["d_differs"]["why"] == "n: 13 vs 15 (|diff| 2 > 0)"  # torch.float32, anygrad.float32
    assert re.search(r"^a_match +yes +0 *$", p.stdout, re.M), p.stdout
    assert re.search(r"^c_crash +no +- +torch run failed: process died", p.stdout, re.M), p.stdout
    p = subprocess.run(cmd + ["--min", "3", "--only", "a_match,d_differs,e_after_crash"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    p = subprocess.run(cmd + ["--min", "2", "--only", "a_match,d_differs,e_after_crash", "--isolated"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_linear_under_autocast_gives_the_autocast_dtype(dev, th):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(4, 8), (3, 8), (3,)])
    with th.autocast("cpu", dtype=th.bfloat16):
        ref = th.nn.functional.linear(th.tensor(x), th.tensor(w), th.tensor(b))
    wa = ag.tensor(w, device=dev, requires_grad=True)
    ba = ag.tensor(b, device=dev, requires_grad=True)
    with ag.autocast(dtype=ag.bfloat16):
        got = ag.functional.linear(ag.tensor(x, device=dev), wa, ba)
    assert ref.dtype == th.bfloat16 and got.dtype == ag.bfloat16
    np.testing.assert_allclose(got.float().cpu().numpy(), ref.float().numpy(), rtol=2e-2, atol=2e-2)
    got.float().sum().backward()
    assert ba.grad.dtype == ag.float32 and wa.grad.dtype == ag.float32
    np.testing.assert_allclose(ba.grad.cpu().numpy(), np.full(3, 4.0), rtol=1e-2)


@pytest.mark.parametrize("fn", ["triu", "tril"])
@pytest.mark.parametrize("diagonal", [0, 1, -1, 3, -5])
def test_triu_tril_against_torch(dev, th, fn, diagonal):
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    ref = getattr(th, fn)(th.tensor(x), diagonal).numpy()
    got = getattr(ag, fn)(ag.tensor(x, device=dev), diagonal)
    assert got.shape == tuple(ref.shape) and got.dtype == ag.float32
    np.testing.assert_array_equal(got.cpu().numpy(), ref)
    np.testing.assert_array_equal(getattr(ag.tensor(x[0], device=dev), fn)(diagonal=diagonal).cpu().numpy(),
                                  getattr(th.tensor(x[0]), fn)(diagonal=diagonal).numpy())


@pytest.mark.parametrize("fn", ["triu", "tril"])
def test_triu_tril_dtypes_infinities_and_gradient(dev, th, fn):
    inf = np.full((4, 4), -np.inf, dtype=np.float32)  # the causal mask idiom: no NaN below
    np.testing.assert_array_equal(getattr(ag, fn)(ag.tensor(inf, device=dev), 1).cpu().numpy(),
                                  getattr(th, fn)(th.tensor(inf), 1).numpy())
    for a, t in ((ag.int64, th.int64), (ag.bool_, th.bool)):
        ref = getattr(th, fn)(th.ones(3, 5, dtype=t), -1)
        got = getattr(ag, fn)(ag.ones(3, 5, dtype=a, device=dev), -1)
        assert got.dtype == a
        assert got.cpu().tolist() == ref.tolist()
    w = ag.ones(3, 3, device=dev, requires_grad=True)
    (getattr(w, fn)() * 2).sum().backward()
    wt = th.ones(3, 3, requires_grad=True)
    (getattr(wt, fn)() * 2).sum().backward()
    assert w.grad.cpu().tolist() == wt.grad.tolist()


def test_triu_tril_errors(th):
    for fn in ("triu", "tril"):
        for shape in ((3,), ()):
            with pytest.raises(IndexError, match="Dimension"):
                getattr(th, fn)(th.ones(shape))
            with pytest.raises(IndexError, match=r"%s\(\): Dimension out of range .*at least 2" % fn):
                getattr(ag, fn)(ag.ones(shape))
        with pytest.raises(TypeError):
            getattr(th, fn)(th.ones(2, 2), 1.5)
        with pytest.raises(TypeError, match="diagonal"):
            getattr(ag, fn)(ag.ones(2, 2), 1.5)
        with pytest.raises(TypeError):
            getattr(ag, fn)([[1.0]])


def test_cuda_module_answers_from_the_devices_present():
    has = [d for d in ag.devices() if d.startswith("cuda:")]
    assert ag.cuda.device_count() == len(has)
    assert ag.cuda.is_available() == bool(has)
    if not has:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            ag.cuda.current_device()
        with pytest.raises(RuntimeError, match="cuda"):
            ag.cuda.synchronize()
    ag.cuda.manual_seed_all(7)
    a = ag.randn(5).tolist()
    ag.manual_seed(7)
    assert ag.randn(5).tolist() == a  # one generator serves every device
    ag.cuda.manual_seed(8)
    assert ag.randn(5).tolist() != a


def test_is_tensor(th):
    for obj in (ag.ones(2), ag.nn.Parameter(ag.ones(2)), ag.tensor(3)):
        assert ag.is_tensor(obj)
    for obj, tobj in (([1.0], [1.0]), (np.ones(2), np.ones(2)), (3.0, 3.0), (None, None)):
        assert ag.is_tensor(obj) == th.is_tensor(tobj) == False  # noqa: E712


def test_view_as_expand_as_type_as_numel(dev, th):
    a = np.arange(6, dtype=np.float32)
    x, t = ag.tensor(a, device=dev), th.tensor(a)
    other, tother = ag.zeros(2, 3, dtype=ag.int64, device=dev), th.zeros(2, 3, dtype=th.int64)
    v = x.view_as(other)
    assert v.shape == (2, 3) and v.tolist() == t.view_as(tother).tolist()
    x[0] = 9.0  # a view: shares x's storage
    assert v[0, 0].item() == 9.0
    e = ag.ones(1, 3, device=dev).expand_as(other)
    assert e.shape == tuple(th.ones(1, 3).expand_as(tother).shape)
    ty = x.type_as(other)
    assert ty.dtype == ag.int64 and ty.tolist() == [9, 1, 2, 3, 4, 5]
    assert ag.numel(other) == th.numel(tother) == 6
    with pytest.raises(TypeError, match="view_as"):
        x.view_as((2, 3))
    with pytest.raises(TypeError, match="numel"):
        ag.numel([1, 2])
    w = ag.ones(2, 3, device=dev, requires_grad=True)
    (w.view_as(ag.zeros(6)) * ag.arange(6.0, device=dev)).sum().backward()
    assert w.grad.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_data_is_cuda_default_dtype_backends(dev, th):
    p = ag.nn.Parameter(ag.ones(3, device=dev))
    d = p.data
    assert not d.requires_grad and p.requires_grad and d.shape == p.shape
    p.data.copy_(ag.tensor([1.0, 2.0, 3.0], device=dev))  # writes p, as torch's p.data.copy_
    assert p.tolist() == [1.0, 2.0, 3.0] and p.requires_grad and p.is_leaf
    assert p.is_cuda == dev.startswith("cuda") and th.ones(1).is_cuda is False
    assert ag.get_default_dtype() == ag.float32 and th.get_default_dtype() == th.float32
    ag.backends.cudnn.deterministic = True
    ag.backends.cudnn.benchmark = False
    assert ag.backends.cudnn.is_available() is False


def test_every_library_function_the_package_calls_has_argtypes():
    """Without argtypes ctypes passes a tensor handle as a C int: the pointer
    is cut to 32 bits, and the call crashes once the heap lies above 4 GiB
    (ag_result_type did, after the DataLoader tests)."""
    import glob
    import re
    from anygrad._lib import lib
    pkg = os.path.dirname(ag.__file__)
    names = set()
    for f in glob.glob(os.path.join(pkg, "**", "*.py"), recursive=True):
        with open(f) as fh:
            names |= set(re.findall(r"\blib\.(ag_[a-z0-9_]+)", fh.read()))
    assert len(names) > 100
    unbound = sorted(n for n in names - {"ag_error_set"}  # variadic: called with bytes only
                     if getattr(lib, n).argtypes is None)
    assert unbound == []


def test_driver_refuses_a_run_that_loaded_the_wrong_torch(tmp_path, th):
    prog = tmp_path / "p.py"
    prog.write_text("import json, torch\nprint(json.dumps({'x': 1}))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for lib, env_ in (("anygrad", env), ("torch", _shim_env())):  # each with the other's torch
        out = tmp_path / ("%s.jsonl" % lib)
        subprocess.run([sys.executable, os.path.join(COMPAT, "_driver.py"), lib, str(out), str(prog)],
                       env=env_, check=True, timeout=120)
        rec = [json.loads(ln) for ln in out.read_text().splitlines()][-1]
        assert not rec["ok"], rec
        assert rec["error"].startswith("`import torch`"), rec
    out = tmp_path / "right.jsonl"
    subprocess.run([sys.executable, os.path.join(COMPAT, "_driver.py"), "anygrad", str(out), str(prog)],
                   env=_shim_env(), check=True, timeout=120)
    rec = [json.loads(ln) for ln in out.read_text().splitlines()][-1]
    assert rec["ok"] and rec["output"] == {"x": 1}, rec
