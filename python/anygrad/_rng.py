"""The default generator's state and the host thread count, with torch's
names: get_rng_state/set_rng_state (a 16-byte uint8 tensor: Philox seed and
offset), initial_seed, seed, set_num_threads/get_num_threads."""
import numbers
import random

from ._lib import lib, check
from ._tensor import default_generator


def get_rng_state():
    """The default generator's state: a uint8 tensor of 16 bytes (seed and
    offset, little endian), to give back to set_rng_state."""
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)


def initial_seed():
    return default_generator.initial_seed()


def seed():
    """Seed the default generator from a nondeterministic source; returns the seed."""
    s = random.SystemRandom().getrandbits(63)
    default_generator.manual_seed(s)
    return s


def set_num_threads(n):
    """The host thread count of CPU kernels (ag_set_num_threads); n >= 1."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise RuntimeError("set_num_threads expects an int, but got %s" % type(n).__name__)
    if n <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    if n > 256:
        raise RuntimeError("set_num_threads(): at most 256 threads, got %d" % n)
    check(lib.ag_set_num_threads(int(n)))


def get_num_threads():
    return int(lib.ag_get_num_threads())
