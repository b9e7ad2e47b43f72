"""torch.utils's counterpart: anygrad.utils.data (datasets, samplers, DataLoader)."""
from . import data  # noqa: F401
