"""anygrad.linalg: the norms of torch.linalg (vector_norm, matrix_norm, norm);
the code is in _tensor_extra."""
from ._tensor_extra import vector_norm, matrix_norm, linalg_norm as norm

__all__ = ["norm", "vector_norm", "matrix_norm"]
