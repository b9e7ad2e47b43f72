"""anygrad.cuda: the few torch.cuda calls a program makes before it picks
its device (`device = "cuda" if torch.cuda.is_available() else "cpu"`,
seeding helpers), answered from the devices anygrad found: "cuda:N" are
the CUDA backend's devices (anygrad.devices()). Memory statistics are
anygrad.memory_stats(device) and friends."""
from ._tensor import manual_seed as _manual_seed


def device_count():
    """The number of CUDA devices anygrad can use (0 without the CUDA backend)."""
    from . import devices
    return len([d for d in devices() if d.startswith("cuda:")])


def is_available():
    """Whether anygrad has a CUDA device."""
    return device_count() > 0


def current_device():
    """0: anygrad has no current-device state; ops run where their tensors are."""
    if not is_available():
        raise RuntimeError("anygrad.cuda.current_device(): no CUDA device (anygrad.devices() lists "
                           "the devices present)")
    return 0


def synchronize(device=None):
    """Wait for the work queued on a CUDA device (cuda:0 by default)."""
    from . import synchronize as _sync
    if device is None:
        device = "cuda:0"
    elif isinstance(device, int) and not isinstance(device, bool):
        device = "cuda:%d" % device
    _sync(device)


def manual_seed(seed):
    """Seed anygrad's default generator. One Philox generator serves every
    device (the same draws on any of them), so this is anygrad.manual_seed:
    unlike torch's, it also reseeds what the CPU draws."""
    _manual_seed(seed)


manual_seed_all = manual_seed
