"""anygrad.utils.data against torch 1.13's torch.utils.data: the batches of
DataLoader (values, dtypes, shapes, drop_last, the short last batch, dict /
tuple / namedtuple samples), shuffling, workers (threads, the C loader for a
TensorDataset) and the errors for bad arguments."""
import collections
import threading

import numpy as np
import pytest

import anygrad as ag
import anygrad.utils.data as agd
from anygrad.utils.data import DataLoader, Dataset, TensorDataset

# torch warns of np.bool_ as an index inside its collate
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
N = 10


def _tdata(lib, n=N):
    """The same four columns for torch and anygrad: float32 rows, int64
    labels, uint8 rows, bool flags."""
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) / 4
    y = (np.arange(n) * 7 % 5).astype(np.int64)
    u = (np.arange(n * 2) % 256).astype(np.uint8).reshape(n, 2)
    b = np.arange(n) % 3 == 0
    return [lib.tensor(a) for a in (x, y, u, b)]


def _plain(batch):
    """A batch as nested Python data: tensors -> (dtype name, shape, values)."""
    if hasattr(batch, "numpy") and hasattr(batch, "dtype"):
        return (str(batch.dtype).split(".")[-1], tuple(batch.shape), batch.numpy().tolist())
    if isinstance(batch, dict):
        return {k: _plain(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return (type(batch).__name__,) + tuple(_plain(v) for v in batch)
    if isinstance(batch, (list, tuple)):
        return type(batch).__name__, [_plain(v) for v in batch]
    return batch


def _same(th_loader, ag_loader):
    want = [_plain(b) for b in th_loader]
    got = [_plain(b) for b in ag_loader]
    assert got == want
    assert len(ag_loader) == len(th_loader) == len(want)
    return got


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("bs,drop", [(1, False), (3, False), (3, True), (4, False), (10, True),
                                     (11, False), (11, True)])
def test_tensordataset_batches_as_torch(th, bs, drop, workers):
    tl = th.utils.data.DataLoader(th.utils.data.TensorDataset(*_tdata(th)), batch_size=bs, drop_last=drop)
    al = DataLoader(TensorDataset(*_tdata(ag)), batch_size=bs, drop_last=drop, num_workers=workers)
    got = _same(tl, al)
    if bs == 11 and drop:
        assert got == []


def test_c_loader_serves_tensordataset_with_workers():
    ds = TensorDataset(*_tdata(ag))
    assert type(iter(DataLoader(ds, batch_size=3, num_workers=2))).__name__ == "_CLoaderIter"
    assert type(iter(DataLoader(ds, batch_size=3))).__name__ == "_TensorIter"
    # a custom collate, or a subclass, goes through the general paths
    assert type(iter(DataLoader(ds, num_workers=2, collate_fn=lambda b: b))).__name__ == "_ThreadIter"


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float64", "int32"])
def test_c_loader_dtypes_and_large_batches(dt):
    n = 1000
    base = ag.tensor(np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3) % 251)
    x = base.to(getattr(ag, dt))
    y = ag.arange(n)
    ds = TensorDataset(x, y)
    g0, g2 = ag.Generator(5), ag.Generator(5)
    ref = [[t.float().numpy() for t in b] for b in DataLoader(ds, batch_size=64, shuffle=True, generator=g0)]
    got = [[t.float().numpy() for t in b] for b in
           DataLoader(ds, batch_size=64, shuffle=True, generator=g2, num_workers=3, prefetch_factor=1)]
    assert len(got) == len(ref) == 16
    for a, b in zip(got, ref):
        assert a[0].shape == b[0].shape and np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    rows = np.concatenate([b[1] for b in got])
    assert sorted(rows.tolist()) == list(range(n))
    # each row travelled with its label
    xs = np.concatenate([b[0] for b in got])
    assert np.array_equal(xs, base.numpy()[rows.astype(np.int64)].astype(np.float32)
                          if dt != "float16" else xs)


class Samples(Dataset):
    """Samples of every kind default_collate takes, the same for both libraries."""

    def __init__(self, kind, n=7):
        self.kind, self.n = kind, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        k = self.kind
        if k == "int":
            return i * 3 - 5
        if k == "float":
            return i / 3
        if k == "bool":
            return i % 2 == 0
        if k == "str":
            return "s%d" % i
        if k == "tuple":
            return (i, float(i) / 2, np.full(2, i, np.float32))
        if k == "list":
            return [i, i + 1]
        if k == "dict":
            return {"x": np.arange(3, dtype=np.float64) + i, "y": i, "name": "n%d" % i,
                    "m": np.int32(i), "f": np.float32(i) / 8, "b": np.bool_(i % 2)}
        if k == "nested":
            return {"a": (i, [np.array([i, -i], np.int64), i * 0.5])}
        if k == "namedtuple":
            return Point(i, np.array([i], np.uint8))
        if k == "numpy":
            return np.arange(4, dtype=np.int32).reshape(2, 2) * i
        raise AssertionError(k)


Point = collections.namedtuple("Point", "x y")
KINDS = ["int", "float", "bool", "str", "tuple", "list", "dict", "nested", "namedtuple", "numpy"]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_collate_as_torch(th, kind, workers):
    _same(th.utils.data.DataLoader(Samples(kind), batch_size=3),
          DataLoader(Samples(kind), batch_size=3, num_workers=workers))


@pytest.mark.parametrize("kind", ["int", "tuple", "dict", "numpy", "namedtuple"])
def test_batch_size_none_converts_as_torch(th, kind):
    _same(th.utils.data.DataLoader(Samples(kind), batch_size=None),
          DataLoader(Samples(kind), batch_size=None))


def test_default_collate_and_convert_directly(th):
    tdc, tcv = th.utils.data.default_collate, th.utils.data._utils.collate.default_convert
    for batch in ([0, 1, 2], [1.5, 2.0], [True, False], [(0, 1), (2, 3)], [[0, 1], [2, 3]],
                  [{"A": 0, "B": 1.0}, {"A": 100, "B": 100.0}], [np.float64(1), np.float64(2)],
                  [np.array([1, 2], np.uint8)]):
        assert _plain(agd.default_collate(batch)) == _plain(tdc(batch))
    for data in (0, np.array([0, 1]), (np.array(0), 1), [np.array([2.5])], {"k": np.float32(3)},
                 Point(np.array(0), np.array(0)), "text", np.array(["a"])):
        g, w = agd.default_convert(data), tcv(data)
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.tolist() == w.tolist()
        else:
            assert _plain(g) == _plain(w)
    ts = [ag.tensor([1.0, 2.0]), ag.tensor([3.0, 4.0])]
    out = agd.default_collate(ts)
    assert out.shape == (2, 2) and out.tolist() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize("batch,exc", [
    ([ag.ones(2), ag.ones(3)], RuntimeError),
    ([[1, 2], [3]], RuntimeError),
    ([np.array(["a"]), np.array(["b"])], TypeError),
    ([object(), object()], TypeError),
    ([None, None], TypeError),
])
def test_collate_errors_as_torch(th, batch, exc):
    tb = [th.tensor(b.numpy()) if isinstance(b, ag.Tensor) else b for b in batch]
    with pytest.raises(exc):
        th.utils.data.default_collate(tb)
    with pytest.raises(exc):
        agd.default_collate(batch)


def _epoch_rows(loader):
    return [b[1].tolist() for b in loader]


@pytest.mark.parametrize("workers", [0, 2])
def test_shuffle_is_a_fixed_permutation(workers):
    ds = TensorDataset(*_tdata(ag, 50))
    ag.manual_seed(3)
    e1 = _epoch_rows(DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers))
    ag.manual_seed(3)
    loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers)
    a, b = _epoch_rows(loader), _epoch_rows(loader)
    assert a == e1  # a fixed seed gives a fixed order
    assert a != b  # and each epoch another one
    ids = [r for batch in a for r in batch]
    assert len(ids) == 50 and [len(x) for x in a] == [8] * 6 + [2]
    labels = ds.tensors[1].tolist()
    assert sorted(ids) == sorted(labels)
    # the rows are permuted, not the columns: x, y, u, b stay together
    x = DataLoader(ds, batch_size=50, shuffle=True, generator=ag.Generator(1), num_workers=workers)
    bx, by, bu, bb = next(iter(x))
    rows = [int(v) for v in (bx.numpy()[:, 0] * 4 / 3)]
    assert sorted(rows) == list(range(50))
    assert by.tolist() == [r * 7 % 5 for r in rows]
    assert bb.tolist() == [r % 3 == 0 for r in rows]


def test_shuffle_generator():
    ds = list(range(40))
    ga, gb = ag.Generator(7), ag.Generator(7)
    a = [b.tolist() for b in DataLoader(ds, batch_size=5, shuffle=True, generator=ga)]
    b = [b.tolist() for b in DataLoader(ds, batch_size=5, shuffle=True, generator=gb)]
    c = [b.tolist() for b in DataLoader(ds, batch_size=5, shuffle=True, generator=ag.Generator(8))]
    assert a == b and a != c
    assert sorted(sum(a, [])) == ds
    # the same order through the thread workers and without them
    d = [b.tolist() for b in DataLoader(ds, batch_size=5, shuffle=True, generator=ag.Generator(7),
                                        num_workers=3)]
    assert d == a
    with pytest.raises(TypeError):
        DataLoader(ds, shuffle=True, generator=np.random.default_rng(0))


def test_samplers(th):
    assert list(agd.SequentialSampler(range(5))) == list(th.utils.data.SequentialSampler(range(5)))
    for bs, drop in ((2, False), (2, True), (5, True), (7, False)):
        want = list(th.utils.data.BatchSampler(range(10), bs, drop))
        got = list(agd.BatchSampler(range(10), bs, drop))
        assert got == want and len(agd.BatchSampler(range(10), bs, drop)) == len(want)
    rs = agd.RandomSampler(range(10), replacement=True, num_samples=25, generator=ag.Generator(0))
    draws = list(rs)
    assert len(draws) == 25 == len(rs) and all(0 <= v < 10 for v in draws)
    rs = agd.RandomSampler(range(4), num_samples=10, generator=ag.Generator(0))
    draws = list(rs)
    assert len(draws) == 10 and sorted(draws[:4]) == [0, 1, 2, 3] and sorted(draws[4:8]) == [0, 1, 2, 3]
    sub = list(agd.SubsetRandomSampler([5, 9, 11], generator=ag.Generator(2)))
    assert sorted(sub) == [5, 9, 11]
    w = list(agd.WeightedRandomSampler([0, 0, 1, 0], 6, generator=ag.Generator(0)))
    assert w == [2] * 6
    w = list(agd.WeightedRandomSampler([1, 0, 1, 1], 3, replacement=False, generator=ag.Generator(0)))
    assert sorted(w) == [0, 2, 3]


@pytest.mark.parametrize("make", [
    lambda m: m.RandomSampler(range(3), num_samples=0),
    lambda m: m.RandomSampler(range(3), replacement="yes"),
    lambda m: m.BatchSampler(range(3), 0, False),
    lambda m: m.BatchSampler(range(3), 2.0, False),
    lambda m: m.BatchSampler(range(3), True, False),
    lambda m: m.BatchSampler(range(3), 2, None),
    lambda m: m.WeightedRandomSampler([1.0, 2.0], 0),
    lambda m: m.WeightedRandomSampler([[1.0, 2.0]], 2),
    lambda m: m.WeightedRandomSampler([1.0, 2.0], 2, replacement=1),
])
def test_sampler_errors_as_torch(th, make):
    with pytest.raises(Exception) as want:
        make(th.utils.data)
    with pytest.raises(want.type):
        make(agd)


def test_random_split(th):
    ds = list(range(20))
    a, b, c = agd.random_split(ds, [10, 7, 3], generator=ag.Generator(4))
    assert (len(a), len(b), len(c)) == (10, 7, 3)
    assert sorted(list(a) + list(b) + list(c)) == ds
    a2, _, _ = agd.random_split(ds, [10, 7, 3], generator=ag.Generator(4))
    assert list(a2) == list(a)
    sizes = [len(s) for s in agd.random_split(range(11), [0.5, 0.3, 0.2], generator=ag.Generator(0))]
    want = [len(s) for s in th.utils.data.random_split(range(11), [0.5, 0.3, 0.2],
                                                        generator=th.Generator().manual_seed(0))]
    assert sizes == want
    for lengths in ([10, 11], [0.5, 0.6], [20, 1]):
        with pytest.raises(ValueError):
            th.utils.data.random_split(ds, lengths)
        with pytest.raises(ValueError):
            agd.random_split(ds, lengths)
    sub = agd.Subset(ds, [3, 1, 4])
    assert len(sub) == 3 and sub[0] == 3 and sub[-1] == 4
    cat = ds + list(range(3))  # plain lists; ConcatDataset of datasets:
    cd = agd.Subset(ds, [0, 1]) + agd.Subset(ds, [5])
    assert [cd[i] for i in range(len(cd))] == [0, 1, 5] and cd[-1] == 5 and len(cat) == 23


def test_tensordataset_errors(th):
    with pytest.raises(AssertionError):
        th.utils.data.TensorDataset(th.ones(3), th.ones(4))
    with pytest.raises(AssertionError):
        TensorDataset(ag.ones(3), ag.ones(4))
    ds = TensorDataset(ag.arange(4), ag.ones(4, 2))
    x, y = ds[2]
    assert len(ds) == 4 and x.item() == 2 and y.shape == (2,)


class Squares(Dataset):
    def __len__(self):
        return 23

    def __getitem__(self, i):
        if not 0 <= i < 23:
            raise IndexError(i)
        return {"i": i, "sq": np.array([i * i], np.float32)}


@pytest.mark.parametrize("workers,prefetch", [(1, 2), (2, 2), (3, 1), (4, 5)])
def test_thread_workers_give_the_batches_of_no_workers(workers, prefetch):
    ref = [_plain(b) for b in DataLoader(Squares(), batch_size=4)]
    for _ in range(2):
        got = [_plain(b) for b in DataLoader(Squares(), batch_size=4, num_workers=workers,
                                             prefetch_factor=prefetch)]
        assert got == ref


class Slow(Dataset):
    """Later samples come faster, so worker threads finish out of order."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        threading.Event().wait(0.002 * (12 - i))
        return i


def test_thread_workers_keep_the_order():
    assert [b.tolist() for b in DataLoader(Slow(), batch_size=2, num_workers=4)] == \
        [[2 * k, 2 * k + 1] for k in range(6)]


class Failing(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 7:
            raise KeyError("sample 7 is missing")
        return i


@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_errors_reach_the_caller(th, workers):
    with pytest.raises(KeyError):
        list(th.utils.data.DataLoader(Failing(), batch_size=2, num_workers=0))
    it = iter(DataLoader(Failing(), batch_size=2, num_workers=workers))
    assert [next(it).tolist() for _ in range(3)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(KeyError, match="sample 7"):
        next(it)


def test_abandoned_iterators_do_not_hang():
    ds = TensorDataset(ag.arange(100).float(), ag.arange(100))
    for workers in (0, 2):
        for loader in (DataLoader(ds, batch_size=3, num_workers=workers),
                       DataLoader(Squares(), batch_size=3, num_workers=workers)):
            for k, _ in enumerate(loader):
                if k == 2:
                    break
            assert len(list(loader)) == len(loader)
    # an abandoned iterator stops its worker threads at once (no reference
    # cycle through them keeps it alive)
    import gc
    gc.collect()
    before = threading.active_count()
    for loader in (DataLoader(Squares(), batch_size=3, num_workers=3),
                   DataLoader(ds, batch_size=3, num_workers=3)):
        it = iter(loader)
        next(it)
        del it
    for _ in range(200):
        if threading.active_count() <= before:
            break
        threading.Event().wait(0.01)
    assert threading.active_count() <= before


def test_worker_info_and_init_fn():
    seen, main = [], agd.get_worker_info()
    lock = threading.Lock()

    class Who(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            info = agd.get_worker_info()
            return -1 if info is None else info.id

    def init(wid):
        with lock:
            seen.append(wid)
    out = sum((b.tolist() for b in DataLoader(Who(), batch_size=2, num_workers=2, worker_init_fn=init)), [])
    assert main is None and sorted(seen) == [0, 1] and set(out) <= {0, 1}
    assert sum((b.tolist() for b in DataLoader(Who(), batch_size=2)), []) == [-1] * 8


class Stream(agd.IterableDataset):
    """Splits [0, n) between the workers as torch's documentation shows."""

    def __init__(self, n, lib_data):
        self.n, self.lib_data = n, lib_data

    def __iter__(self):
        info = self.lib_data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        per = -(-self.n // info.num_workers)
        return iter(range(info.id * per, min(self.n, (info.id + 1) * per)))


ITER_CASES = [(w, bs, drop) for w in (0, 2, 3) for bs, drop in ((4, False), (4, True), (None, False))]
_TORCH_ITER = r"""
import json, sys
import torch
import torch.utils.data as d
class Stream(d.IterableDataset):
    def __init__(self, n):
        self.n = n
    def __iter__(self):
        info = d.get_worker_info()
        if info is None:
            return iter(range(self.n))
        per = -(-self.n // info.num_workers)
        return iter(range(info.id * per, min(self.n, (info.id + 1) * per)))
out = []
for w, bs, drop in json.loads(sys.argv[1]):
    out.append([b.tolist() if hasattr(b, "tolist") else b
                for b in d.DataLoader(Stream(17), batch_size=bs, drop_last=drop, num_workers=w)])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def torch_iterable_batches():
    """torch's batches with its own worker processes, made in a fresh
    interpreter: forking this one (OpenMP, OpenCL and loader threads
    running) can crash torch's workers."""
    import json
    import subprocess
    import sys
    if torch_missing():
        pytest.skip("torch is not installed")
    r = subprocess.run([sys.executable, "-c", _TORCH_ITER, json.dumps(ITER_CASES)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return dict(zip(ITER_CASES, json.loads(r.stdout.strip().splitlines()[-1])))


def torch_missing():
    try:
        import torch  # noqa: F401
        return False
    except ImportError:
        return True


@pytest.mark.parametrize("workers,bs,drop", ITER_CASES)
def test_iterable_dataset_as_torch(torch_iterable_batches, workers, bs, drop):
    # torch's own worker processes, interleaved batch by batch
    ads = type("AS", (agd.IterableDataset,), dict(Stream.__dict__))(17, agd)
    got = [b.tolist() if hasattr(b, "tolist") else b
           for b in DataLoader(ads, batch_size=bs, drop_last=drop, num_workers=workers)]
    assert got == torch_iterable_batches[(workers, bs, drop)]
    if workers:
        assert got != torch_iterable_batches[(0, bs, drop)]  # interleaved, not in order


def test_iterable_dataset_len(th):
    class L(agd.IterableDataset):
        def __iter__(self):
            return iter(range(10))

        def __len__(self):
            return 10
    assert len(DataLoader(L(), batch_size=3)) == 4
    assert len(DataLoader(L(), batch_size=3, drop_last=True)) == 3


@pytest.mark.parametrize("kwargs", [
    dict(batch_size=0), dict(batch_size=-2), dict(batch_size=2.5), dict(batch_size=True),
    dict(shuffle=True, sampler=[0, 1]), dict(batch_sampler=[[0]], batch_size=2),
    dict(batch_sampler=[[0]], shuffle=True), dict(batch_sampler=[[0]], drop_last=True),
    dict(batch_sampler=[[0]], sampler=[0]), dict(batch_size=None, drop_last=True),
    dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=4),
    dict(persistent_workers=True), dict(drop_last="yes"), dict(multiprocessing_context="fork"),
])
def test_dataloader_argument_errors_as_torch(th, kwargs):
    with pytest.raises(Exception) as want:
        th.utils.data.DataLoader(list(range(5)), **kwargs)
    with pytest.raises(want.type):
        DataLoader(list(range(5)), **kwargs)


@pytest.mark.parametrize("kwargs", [dict(shuffle=True), dict(sampler=[0]), dict(batch_sampler=[[0]])])
def test_iterable_dataset_argument_errors_as_torch(th, kwargs):
    class T(th.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    class A(agd.IterableDataset):
        def __iter__(self):
            return iter(range(3))
    with pytest.raises(ValueError):
        th.utils.data.DataLoader(T(), **kwargs)
    with pytest.raises(ValueError):
        DataLoader(A(), **kwargs)


def test_attributes_frozen_as_torch(th):
    for lib_loader in (th.utils.data.DataLoader, DataLoader):
        ld = lib_loader(list(range(5)), batch_size=2)
        with pytest.raises(ValueError):
            ld.batch_size = 3
        ld.num_workers = 0  # not frozen in torch either
    ld = DataLoader(list(range(5)), batch_size=2)
    assert (ld.batch_size, ld.drop_last, ld.num_workers) == (2, False, 0)
    assert isinstance(ld.sampler, agd.SequentialSampler) and isinstance(ld.batch_sampler, agd.BatchSampler)


@pytest.mark.parametrize("workers", [0, 2])
def test_custom_sampler_and_batch_sampler_as_torch(th, workers):
    order = [9, 0, 4, 4, 7, 1, 3]
    _same(th.utils.data.DataLoader(th.utils.data.TensorDataset(*_tdata(th)), batch_size=3, sampler=order),
          DataLoader(TensorDataset(*_tdata(ag)), batch_size=3, sampler=order, num_workers=workers))
    batches = [[1, 2], [0], [9, 9, 9]]
    _same(th.utils.data.DataLoader(th.utils.data.TensorDataset(*_tdata(th)), batch_sampler=batches),
          DataLoader(TensorDataset(*_tdata(ag)), batch_sampler=batches, num_workers=workers))


def test_tensordataset_on_device(dev):
    x = ag.tensor(np.arange(12, dtype=np.float32).reshape(6, 2), device=dev)
    y = ag.tensor(np.arange(6, dtype=np.float32) * 2, device=dev)
    for workers in (0, 2):
        got = list(DataLoader(TensorDataset(x, y), batch_size=4, num_workers=workers))
        assert [len(b) for b in got] == [2, 2]
        assert all(str(t.device) == dev for b in got for t in b)
        assert got[0][0].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
        assert got[1][1].tolist() == [8.0, 10.0]


def test_reachable_from_anygrad():
    import anygrad.utils.data as m
    assert ag.utils.data is m
    from anygrad.utils.data import DataLoader as D, Dataset as S, TensorDataset as T  # noqa: F401


@pytest.mark.parametrize("workers", [0, 2])
def test_empty_and_zero_width_as_torch(th, workers):
    _same(th.utils.data.DataLoader(th.utils.data.TensorDataset(th.zeros(0, 3), th.zeros(0)), batch_size=2),
          DataLoader(TensorDataset(ag.zeros(0, 3), ag.zeros(0)), batch_size=2, num_workers=workers))
    _same(th.utils.data.DataLoader(th.utils.data.TensorDataset(th.zeros(5, 0), th.arange(5)), batch_size=2),
          DataLoader(TensorDataset(ag.zeros(5, 0), ag.arange(5)), batch_size=2, num_workers=workers))
