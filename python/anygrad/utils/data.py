"""torch.utils.data over anygrad tensors: datasets, samplers, the default
collate and DataLoader, with torch 1.13's arguments, batches and errors.

Workers are threads, not processes (docs/python.md, "Data loading"): a
TensorDataset of CPU tensors is loaded by the C host-staging loader
(ag_loader: worker threads fill pinned batches, copies on a copy stream),
any other dataset by Python threads; batches come in sampler order either way."""
import atexit
import bisect
import collections.abc
import ctypes
import itertools
import math
import queue
import re
import threading
import warnings
import weakref
from ctypes import byref, c_void_p

import numpy as np

from .. import _lib
from .._lib import lib, check, raise_last
from .._tensor import Tensor, Generator, _wrap, _i64, tensor, rand, float64
from .._ops import stack

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset",
           "random_split", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "DataLoader", "default_collate", "default_convert",
           "get_worker_info"]


# ---- datasets ------------------------------------------------------------------------------

class Dataset:
    """A map-style dataset: __getitem__(index) and (usually) __len__."""

    def __getitem__(self, index):
        raise NotImplementedError

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read by iterating it (__iter__); DataLoader gives no indices."""

    def __iter__(self):
        raise NotImplementedError

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for t in tensors); every tensor has the same size(0)."""

    def __init__(self, *tensors):
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError("TensorDataset(): expected Tensor arguments, got %s" % type(t).__name__)
        assert all(tensors[0].size(0) == t.size(0) for t in tensors), "Size mismatch between tensors"
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class ConcatDataset(Dataset):
    """The concatenation of map-style datasets."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        assert len(self.datasets) > 0, "datasets should not be an empty iterable"
        for d in self.datasets:
            assert not isinstance(d, IterableDataset), "ConcatDataset does not support IterableDataset"
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        k = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[k][idx - (self.cumulative_sizes[k - 1] if k else 0)]


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other."""

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            assert isinstance(d, IterableDataset), "ChainDataset only supports IterableDataset"
            yield from d

    def __len__(self):
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of dataset at indices."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


# ---- randomness: every draw comes from an anygrad generator --------------------------------

def _check_generator(g, fn):
    if g is not None and not isinstance(g, Generator):
        raise TypeError("%s: generator must be an anygrad.Generator or None, got %s"
                        % (fn, type(g).__name__))


def _rng(generator):
    """A NumPy Generator seeded with 64 bits drawn from anygrad's generator
    (the default one for None), which advances it: a fixed anygrad seed gives
    a fixed order, and each call (each epoch) another one."""
    u = rand(4, generator=generator).numpy()  # float32 in [0, 1): 24 random bits each
    seed = 0
    for v in u:
        seed = (seed << 16) | (int(float(v) * 65536.0) & 0xFFFF)
    return np.random.Generator(np.random.PCG64(seed))


def _randperm(n, generator=None):
    return _rng(generator).permutation(n).tolist()


def random_split(dataset, lengths, generator=None):
    """Split dataset into non-overlapping Subsets of the given lengths (or
    fractions summing to 1), at a permutation drawn from generator."""
    _check_generator(generator, "random_split()")
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            sizes.append(int(math.floor(n * frac)))
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, s in enumerate(sizes):
            if s == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.")
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _randperm(sum(lengths), generator)
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[start:start + length]))
        start += length
    return out


# ---- samplers ------------------------------------------------------------------------------

class Sampler:
    """Yields dataset indices (or lists of them, for a batch sampler)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A permutation of the dataset per iteration (or num_samples draws with
    replacement), from generator (None: anygrad's default generator). The
    orders are not torch's: another RNG draws them (docs/python.md)."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        _check_generator(generator, "RandomSampler()")
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError("replacement should be a boolean value, but got "
                            "replacement={}".format(self.replacement))
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError("num_samples should be a positive integer "
                             "value, but got num_samples={}".format(self.num_samples))

    @property
    def num_samples(self):
        if self._num_samples is None:
            return len(self.data_source)
        return self._num_samples

    def _indices(self):
        n = len(self.data_source)
        rng = _rng(self.generator)
        if self.replacement:
            return rng.integers(0, n, size=self.num_samples).tolist()
        out = []
        for _ in range(self.num_samples // n):
            out += rng.permutation(n).tolist()
        return out + rng.permutation(n).tolist()[:self.num_samples % n]

    def __iter__(self):
        return iter(self._indices())

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """indices in a random order (without replacement)."""

    def __init__(self, indices, generator=None):
        _check_generator(generator, "SubsetRandomSampler()")
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        for i in _randperm(len(self.indices), self.generator):
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices drawn with probabilities proportional to weights."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError("num_samples should be a positive integer "
                             "value, but got num_samples={}".format(num_samples))
        if not isinstance(replacement, bool):
            raise ValueError("replacement should be a boolean value, but got "
                             "replacement={}".format(replacement))
        _check_generator(generator, "WeightedRandomSampler()")
        w = np.asarray(weights.numpy() if isinstance(weights, Tensor) else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError("weights should be a 1d sequence but given "
                             "weights have shape {}".format(tuple(w.shape)))
        if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
            raise RuntimeError("WeightedRandomSampler: invalid multinomial distribution "
                               "(weights must be finite, >= 0, with a positive sum)")
        if not replacement and num_samples > int((w > 0).sum()):
            raise RuntimeError("WeightedRandomSampler: cannot sample n_sample > prob_dist.size(-1) "
                               "samples without replacement")
        self.weights = tensor(w, dtype=float64)
        self._w = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        rng = _rng(self.generator)
        p = self._w / self._w.sum()
        return iter(rng.choice(len(p), size=self.num_samples, replace=self.replacement, p=p).tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of batch_size indices from sampler (the last one shorter unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError("batch_size should be a positive integer value, "
                             "but got batch_size={}".format(batch_size))
        if not isinstance(drop_last, bool):
            raise ValueError("drop_last should be a boolean value, but got "
                             "drop_last={}".format(drop_last))
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size


class _InfiniteConstantSampler(Sampler):
    def __iter__(self):
        while True:
            yield None


# ---- collate -------------------------------------------------------------------------------

_np_str_obj = re.compile(r"[SaUO]")
_collate_err = ("default_collate: batch must contain tensors, numpy arrays, numbers, "
                "dicts or lists; found {}")


def _stack(batch):
    elem = batch[0]
    for k, t in enumerate(batch):
        if not isinstance(t, Tensor):
            raise TypeError("default_collate: expected Tensor at element %d, got %s" % (k, type(t).__name__))
        if t.shape != elem.shape:
            raise RuntimeError("stack expects each tensor to be equal size, but got %s at entry 0 "
                               "and %s at entry %d" % (list(elem.shape), list(t.shape), k))
        if t.device != elem.device:
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                               "devices, %s and %s!" % (elem.device, t.device))
    return stack(batch, 0)


def default_collate(batch):
    """torch 1.13's default_collate: tensors are stacked, NumPy arrays and
    scalars become tensors of their dtype, Python floats float64, ints int64
    (bools bool), strings stay lists, and mappings, namedtuples and sequences
    are collated field by field (a tuple sample gives a list)."""
    elem = batch[0]
    elem_type = type(elem)
    if isinstance(elem, Tensor):
        return _stack(batch)
    if isinstance(elem, np.ndarray):
        if _np_str_obj.search(elem.dtype.str) is not None:
            raise TypeError(_collate_err.format(elem.dtype))
        return default_collate([tensor(b) for b in batch])
    if isinstance(elem, (np.bool_, np.number, np.object_)):
        arr = np.asarray(batch)
        if arr.dtype.kind not in "biuf":
            raise TypeError(_collate_err.format(arr.dtype))
        return tensor(arr)
    if isinstance(elem, float):
        return tensor(batch, dtype=float64)
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        try:
            return elem_type({key: default_collate([d[key] for d in batch]) for key in elem})
        except TypeError:
            return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [default_collate(samples) for samples in transposed]
        try:
            return elem_type([default_collate(samples) for samples in transposed])
        except TypeError:
            return [default_collate(samples) for samples in transposed]
    raise TypeError(_collate_err.format(elem_type))


def default_convert(data):
    """torch 1.13's default_convert (batch_size=None): NumPy arrays and
    scalars become tensors, containers are converted element by element."""
    elem_type = type(data)
    if isinstance(data, Tensor):
        return data
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_", "bytes_"):
        if elem_type.__name__ == "ndarray" and _np_str_obj.search(data.dtype.str) is not None:
            return data
        return tensor(np.asarray(data))  # a NumPy scalar keeps its dtype
    if isinstance(data, collections.abc.Mapping):
        try:
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


# ---- workers -------------------------------------------------------------------------------

class WorkerInfo:
    """What get_worker_info() returns inside a worker thread."""

    def __init__(self, id, num_workers, seed, dataset):  # noqa: A002
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return "WorkerInfo(id=%d, num_workers=%d, seed=%d, dataset=%r)" % (
            self.id, self.num_workers, self.seed, self.dataset)


_worker_local = threading.local()


def get_worker_info():
    """The WorkerInfo of the calling DataLoader worker thread; None elsewhere."""
    return getattr(_worker_local, "info", None)


# ---- DataLoader ----------------------------------------------------------------------------

class DataLoader:
    """torch.utils.data.DataLoader with torch 1.13's arguments and checks.

    num_workers > 0 loads on threads (not processes): a TensorDataset of CPU
    tensors through the C loader (ag_loader), other datasets through Python
    threads; the batches and their order are those of num_workers=0.
    pin_memory is accepted: CPU batches are already host memory (the C loader
    stages them through pinned buffers). multiprocessing_context,
    persistent_workers and timeout are checked as torch checks them."""

    _initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=2, persistent_workers=False, pin_memory_device=""):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; "
                             "use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor != 2:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing.")
        assert prefetch_factor > 0
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None and num_workers == 0:
            raise ValueError(("multiprocessing_context can only be used with "
                              "multi-process loading (num_workers > 0), but got "
                              "num_workers={}").format(num_workers))
        _check_generator(generator, "DataLoader()")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in {False, None}:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 "shuffle option, but got shuffle={}".format(shuffle))
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 "sampler option, but got sampler={}".format(sampler))
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 "batch_sampler option, but got batch_sampler={}".format(batch_sampler))
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive "
                                 "with batch_size, shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None:
            if drop_last:
                raise ValueError("batch_size=None option disables auto-batching "
                                 "and is mutually exclusive with drop_last")
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._initialized = True

    def __setattr__(self, attr, val):
        if self._initialized and attr in ("batch_size", "batch_sampler", "sampler", "drop_last",
                                          "dataset", "persistent_workers"):
            raise ValueError("{} attribute should not be set after {} is "
                             "initialized".format(attr, self.__class__.__name__))
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self):
        if self._iterable:
            length = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        return len(self._index_sampler)

    def _tensor_fields(self):
        """The tensors of a TensorDataset that the index fast paths may read
        (default collate, the built-in samplers), else None."""
        ds = self.dataset
        if (type(ds) is not TensorDataset or self.collate_fn is not default_collate
                or type(self.batch_sampler) is not BatchSampler
                or type(self.sampler) not in (SequentialSampler, RandomSampler)
                or self.sampler.data_source is not ds or self.batch_sampler.sampler is not self.sampler):
            return None
        ts = ds.tensors
        if not ts or any(t.device.type != "cpu" or t.requires_grad or t.ndim < 1 or t.numel() == 0
                         for t in ts):
            return None
        return ts

    def __iter__(self):
        ts = self._tensor_fields()
        if self.num_workers == 0:
            if ts is not None:
                return _TensorIter(self, ts)
            return _SingleIter(self)
        if ts is not None and _CLoaderIter.fits(self, ts):
            return _CLoaderIter(self, ts)
        if self._iterable:
            return _IterableThreadIter(self)
        return _ThreadIter(self)


class _BaseIter:
    def __init__(self, loader):
        self._loader = loader
        # as torch, every iterator draws its workers' base seed first, then
        # the sampler draws its order: the same generator gives the same
        # batches with and without workers
        self._seed = int(_rng(loader.generator).integers(0, 2 ** 63))
        self._collate = loader.collate_fn
        self._auto = loader._auto_collation

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)


class _SingleIter(_BaseIter):
    """num_workers=0: the batches made on the calling thread."""

    def __init__(self, loader):
        super().__init__(loader)
        self._ds = loader.dataset
        if loader._iterable:
            self._ds_iter = iter(self._ds)
        self._index_iter = iter(loader._index_sampler)

    def __next__(self):
        ld = self._loader
        if ld._iterable:
            if self._auto:
                data = list(itertools.islice(self._ds_iter, ld.batch_size))
                if not data or (ld.drop_last and len(data) < ld.batch_size):
                    raise StopIteration
            else:
                data = next(self._ds_iter)
            return self._collate(data)
        idx = next(self._index_iter)
        if self._auto:
            return self._collate([self._ds[i] for i in idx])
        return self._collate(self._ds[idx])


class _HostRows:
    """The rows of CPU tensors as bytes, read in place: row r of tensor k is
    src[k][r] (raw bytes, so every dtype, bfloat16 included, is copied as it
    is). The tensors are kept alive as long as this object."""

    def __init__(self, ts):
        check(lib.ag_device_synchronize(ts[0].device._d))  # work queued on them is done
        self.keep = [t.contiguous() for t in ts]
        self.src = []
        for t in self.keep:
            row = t.dtype.itemsize * int(np.prod(t.shape[1:], dtype=np.int64))
            n = t.shape[0]
            ptr = lib.ag_tensor_data_ptr(t._handle)
            if not ptr:
                raise_last("DataLoader")
            self.src.append(np.frombuffer((ctypes.c_char * (n * row)).from_address(ptr),
                                          dtype=np.uint8).reshape(n, row))

    def gather(self, idx):
        out = []
        for t, src in zip(self.keep, self.src):
            rows = np.take(src, idx, axis=0)
            shape = [len(idx)] + list(t.shape[1:])
            out.append(_wrap(lib.ag_from_host(t.device._d, t.dtype.code, len(shape), _i64(shape),
                                              rows.ctypes.data), "DataLoader"))
        return out


class _TensorIter(_BaseIter):
    """num_workers=0 on a TensorDataset of CPU tensors: the rows of a batch
    gathered in one NumPy take per tensor, the values, dtypes and shapes that
    stacking its samples gives."""

    def __init__(self, loader, ts):
        super().__init__(loader)
        self._rows = _HostRows(ts)
        self._index_iter = iter(loader.batch_sampler)

    def __next__(self):
        return self._rows.gather(np.asarray(next(self._index_iter), dtype=np.int64))


class _Fill:
    """What ag_loader's workers run (a ctypes callback): gather the rows of
    batch positions `samples` of the epoch's order into the pinned buffers.
    It holds no reference to the iterator, so an abandoned iterator is freed
    (and its loader destroyed) at once."""

    def __init__(self, src, order, loader, seed):
        self.src, self.order = src, order
        self.num_workers, self.init_fn = loader.num_workers, loader.worker_init_fn
        self.dataset = loader.dataset
        self.seed = seed
        self.error = None
        self.started = set()
        self.lock = threading.Lock()

    def __call__(self, user, epoch, batch_index, samples, rows, batch):
        try:
            tid = threading.get_ident()
            if tid not in self.started:  # this worker's first batch
                with self.lock:
                    wid = len(self.started)
                    self.started.add(tid)
                _worker_local.info = WorkerInfo(wid, self.num_workers, self.seed + wid, self.dataset)
                if self.init_fn is not None:
                    self.init_fn(wid)
            rows_idx = self.order[np.ctypeslib.as_array(samples, (rows,))]
            for k, src in enumerate(self.src):
                ptr = lib.ag_loader_batch_data(batch, k)
                dst = np.frombuffer((ctypes.c_char * (rows * src.shape[1])).from_address(ptr),
                                    dtype=np.uint8).reshape(rows, src.shape[1])
                np.take(src, rows_idx, axis=0, out=dst)
            return 0
        except BaseException as e:  # noqa: B902 (raised again by __next__ on the caller's thread)
            self.error = e
            return 1  # AG_ERR_INVALID: ag_loader_next reports this batch as failed


_live_loaders = weakref.WeakSet()


@atexit.register
def _close_loaders():
    """Stop the C loaders' workers before the interpreter goes (they call
    into Python)."""
    for it in list(_live_loaders):
        it._close()


class _CLoaderIter(_BaseIter):
    """num_workers > 0 on a TensorDataset of CPU tensors: ag_loader's worker
    threads gather the rows of each batch into pinned buffers (_Fill, NumPy's
    take doing the copy) and ag_loader_next hands them out in order, copied
    on the loader's copy stream."""

    @staticmethod
    def fits(loader, ts):
        return (len(ts) <= _lib.LOADER_MAX_FIELDS and all(t.ndim <= _lib.MAX_DIMS for t in ts)
                and all(d > 0 for t in ts for d in t.shape[1:]) and len(loader.sampler) > 0)

    def __init__(self, loader, ts):
        super().__init__(loader)
        self._l = None
        order = np.asarray(list(loader.sampler), dtype=np.int64)
        bs = loader.batch_sampler
        self._rows = _HostRows(ts)  # the sources, alive as long as the loader
        cfg = _lib.LoaderConfig()
        cfg.device = ts[0].device._d
        cfg.num_samples = len(order)
        cfg.batch_size = bs.batch_size
        cfg.drop_last = bs.drop_last
        cfg.epochs = 1
        cfg.num_workers = loader.num_workers
        cfg.prefetch = loader.prefetch_factor * loader.num_workers
        cfg.n_fields = len(ts)
        for k, t in enumerate(ts):
            f = cfg.fields[k]
            f.dtype = t.dtype.code
            f.ndim = t.ndim
            for d, size in enumerate(t.shape):
                f.shape[d] = size
        self._state = _Fill(self._rows.src, order, loader, self._seed)
        self._fill_fn = _lib.LOADER_FILL_FN(self._state)  # referenced as long as the loader lives
        cfg.fill = self._fill_fn
        self._n = len(ts)
        h = lib.ag_loader_create(byref(cfg))
        if not h:
            raise_last("DataLoader")
        self._l = h
        _live_loaders.add(self)

    def __next__(self):
        if self._l is None:
            raise StopIteration
        out = (c_void_p * self._n)()
        info = _lib.LoaderBatchInfo()
        st = lib.ag_loader_next(self._l, out, byref(info))
        if st != 0:
            err, self._state.error = self._state.error, None
            self._close()
            if err is not None:
                lib.ag_error_clear()
                raise err
            raise_last("DataLoader", st)
        if info.end:
            self._close()
            raise StopIteration
        return [_wrap(out[k], "DataLoader") for k in range(self._n)]

    def _close(self):
        h, self._l = self._l, None
        if h:
            lib.ag_loader_destroy(h)  # joins the workers (ctypes releases the GIL meanwhile)

    def __del__(self):
        self._close()


class _Pool:
    """The Python worker threads of one epoch over a map-style dataset: they
    take (batch number, indices) tasks and post (ok, batch or exception)
    results. Holds no reference to the iterator: an abandoned iterator is
    freed and stops its threads."""

    def __init__(self, loader, auto, seed):
        self.ds, self.collate, self.auto = loader.dataset, loader.collate_fn, auto
        self.tasks = queue.Queue()
        self.cv = threading.Condition()
        self.results = {}
        self.threads = []
        for w in range(loader.num_workers):
            args = (w, loader.num_workers, seed + w, loader.worker_init_fn)
            th = threading.Thread(target=self.work, args=args, daemon=True,
                                  name="anygrad DataLoader worker %d" % w)
            th.start()
            self.threads.append(th)

    def work(self, wid, n, seed, init_fn):
        _worker_local.info = WorkerInfo(wid, n, seed, self.ds)
        init_error = None
        if init_fn is not None:
            try:
                init_fn(wid)
            except BaseException as e:  # noqa: B902
                init_error = e
        while True:
            task = self.tasks.get()
            if task is None:
                return
            k, idx = task
            try:
                if init_error is not None:
                    raise init_error
                if self.auto:
                    res = (True, self.collate([self.ds[i] for i in idx]))
                else:
                    res = (True, self.collate(self.ds[idx]))
            except BaseException as e:  # noqa: B902
                res = (False, e)
            with self.cv:
                self.results[k] = res
                self.cv.notify_all()

    def shutdown(self):
        threads, self.threads = self.threads, []
        for _ in threads:
            self.tasks.put(None)


class _ThreadIter(_BaseIter):
    """num_workers > 0 on a map-style dataset: Python threads fetch and
    collate whole batches; at most prefetch_factor * num_workers batches are
    in flight, and they are returned in the sampler's order."""

    def __init__(self, loader):
        super().__init__(loader)
        self._index_iter = iter(loader._index_sampler)
        self._sent = self._rcvd = 0
        self._exhausted = False
        self._pool = _Pool(loader, self._auto, self._seed)
        for _ in range(loader.prefetch_factor * loader.num_workers):
            self._send()

    def _send(self):
        if self._exhausted:
            return
        try:
            idx = next(self._index_iter)
        except StopIteration:
            self._exhausted = True
            return
        self._pool.tasks.put((self._sent, idx))
        self._sent += 1

    def __next__(self):
        if self._rcvd >= self._sent:
            self._shutdown()
            raise StopIteration
        k, pool = self._rcvd, self._pool
        with pool.cv:
            while k not in pool.results:
                pool.cv.wait()
            ok, val = pool.results.pop(k)
        self._rcvd += 1
        if not ok:
            self._shutdown()
            raise val
        self._send()
        return val

    def _shutdown(self):
        self._exhausted = True
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown()

    def __del__(self):
        self._shutdown()


class _Streams:
    """The worker threads of one epoch over an IterableDataset: worker w
    iterates the dataset and puts (ok, batch or exception) into queue w, then
    None. Holds no reference to the iterator."""

    def __init__(self, loader, auto, seed):
        n = loader.num_workers
        self.queues = [queue.Queue(maxsize=loader.prefetch_factor) for _ in range(n)]
        self.stop = threading.Event()
        for w in range(n):
            threading.Thread(target=self.work, args=(loader, auto, w, seed + w), daemon=True,
                             name="anygrad DataLoader worker %d" % w).start()

    def put(self, q, item):
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work(self, ld, auto, wid, seed):
        q, collate = self.queues[wid], ld.collate_fn
        _worker_local.info = WorkerInfo(wid, ld.num_workers, seed, ld.dataset)
        try:
            if ld.worker_init_fn is not None:
                ld.worker_init_fn(wid)
            it = iter(ld.dataset)
            while not self.stop.is_set():
                if auto:
                    data = list(itertools.islice(it, ld.batch_size))
                    if not data or (ld.drop_last and len(data) < ld.batch_size):
                        break
                else:
                    try:
                        data = next(it)
                    except StopIteration:
                        break
                if not self.put(q, (True, collate(data))):
                    return
        except BaseException as e:  # noqa: B902
            self.put(q, (False, e))
            return
        self.put(q, None)


class _IterableThreadIter(_BaseIter):
    """num_workers > 0 on an IterableDataset: as torch's worker processes,
    each worker thread iterates the dataset (get_worker_info() tells it which
    worker it is, to split the data) and batches are taken from the workers
    in turn; a worker whose iterator ends leaves the turn."""

    def __init__(self, loader):
        super().__init__(loader)
        self._streams = _Streams(loader, self._auto, self._seed)
        self._active = list(range(loader.num_workers))
        self._turn = 0

    def __next__(self):
        while self._active:
            self._turn %= len(self._active)
            w = self._active[self._turn]
            item = self._streams.queues[w].get()
            if item is None:
                self._active.pop(self._turn)
                continue
            self._turn += 1
            ok, val = item
            if not ok:
                self._streams.stop.set()
                self._active = []
                raise val
            return val
        self._streams.stop.set()
        raise StopIteration

    def __del__(self):
        streams = getattr(self, "_streams", None)
        if streams is not None:
            streams.stop.set()
