"""What every PyTorch reference in bench/ sets up, so a ratio compares like
with like:

- threads: torch.set_num_threads(n) sizes PyTorch's OpenMP pool only; the
  BLAS behind torch (Debian: libblas.so.3 -> OpenBLAS, pthreads build) keeps
  one thread per core unless told. set_threads() tells it too, so "1 thread"
  is one thread for the GEMMs as well (anygrad's ag_set_num_threads covers
  its BLAS calls the same way). PyPI's torch 2.x wheels carry MKL inside
  libtorch_cpu, which torch.set_num_threads sizes itself.
- host memory: glibc returns freed blocks above its mmap threshold to the
  system, so each training step of a PyTorch model faults its activations
  in again (about 12k page faults per GPT step here, 2-3x the step time, and
  a bimodal time as glibc's threshold adapts). Deployments run PyTorch with
  jemalloc/tcmalloc or equivalent settings; keep_memory() makes glibc keep
  freed memory (mallopt), so PyTorch is timed at its best. anygrad's own
  caching allocator keeps its blocks either way.
"""
import ctypes
import ctypes.util

import torch

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_memory():
    """glibc: never trim the heap, no mmap for large blocks. True if applied."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30) and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
                    and libc.mallopt(_M_TOP_PAD, 256 << 20))
    except OSError:
        return False


def _openblas():
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            lib = ctypes.CDLL(name)
            if hasattr(lib, "openblas_set_num_threads"):
                return lib
        except OSError:
            pass
    return None


_BLAS = _openblas()


def set_threads(n):
    """PyTorch's pool and its BLAS to n threads; returns a description."""
    torch.set_num_threads(n)
    if torch.backends.mkl.is_available():  # PyPI's wheels: MKL inside libtorch_cpu, sized by set_num_threads
        return "torch.set_num_threads(%d) (BLAS: MKL in torch, same count)" % n
    if _BLAS is not None:
        _BLAS.openblas_set_num_threads(n)
        return "torch.set_num_threads(%d), openblas_set_num_threads(%d)" % (n, n)
    return "torch.set_num_threads(%d) (BLAS threads not set: not OpenBLAS)" % n
