"""Argument checks for the functions learners write: a clear error naming the shapes, never a silent broadcast.

The exercise notebooks call these at the top of each graded function, outside the part the learner writes.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tensor", "vector", "matmul", "same_length", "same_dtype", "query_keys", "top_k_count", "scalar"]


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


def tensor(fn: str, name: str, value: Any, *, ndim: int | None = None, floating: bool = True) -> torch.Tensor:
    """`value` must be a torch tensor (of `ndim` dimensions, floating point unless told otherwise)."""
    if not isinstance(value, torch.Tensor):
        hint = " (wrap it with torch.tensor(...))" if isinstance(value, (list, tuple, float, int)) else ""
        if type(value).__module__.startswith("numpy"):
            hint = " (convert it with torch.from_numpy(...))"
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(value).__name__}{hint}.")
    if ndim is not None and value.dim() != ndim:
        what = {0: "a scalar tensor", 1: "a 1-D vector", 2: "a 2-D matrix"}.get(ndim, f"{ndim}-D")
        raise ValueError(f"{fn}: {name} must be {what}, got shape {_shape(value)} ({value.dim()}-D).")
    if floating and not value.is_floating_point():
        raise TypeError(
            f"{fn}: {name} must be floating point (float16, float32 or float64), got {value.dtype}; "
            f"convert it with {name}.float()."
        )
    return value


def same_dtype(fn: str, **tensors: torch.Tensor) -> None:
    """Every named tensor has the dtype of the first one (no silent type promotion)."""
    (n0, t0), *rest = tensors.items()
    for name, t in rest:
        if t.dtype != t0.dtype:
            raise TypeError(f"{fn}: {n0} is {t0.dtype} but {name} is {t.dtype}; convert one so both match.")


def vector(fn: str, name: str, value: Any) -> torch.Tensor:
    """`value` as a 1-D floating tensor, or a TypeError/ValueError naming `fn`'s argument `name` and what it got."""
    return tensor(fn, name, value, ndim=1)


def same_length(fn: str, **vectors: Any) -> None:
    """Each argument is a 1-D floating tensor, all of the same length and dtype."""
    for name, v in vectors.items():
        vector(fn, name, v)
    items = list(vectors.items())
    (n0, v0) = items[0]
    for _, v in items[1:]:
        if v.shape != v0.shape:
            shapes = ", ".join(f"{k} has shape {_shape(t)}" for k, t in items)
            raise ValueError(f"{fn}: {shapes}; a dot product needs vectors of the same length (no broadcasting).")
    same_dtype(fn, **vectors)


def scalar(fn: str, name: str, value: Any) -> None:
    """A Python number or a tensor with a single element."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dim() <= 1:
        return
    shape = f" of shape {_shape(value)}" if isinstance(value, torch.Tensor) else ""
    raise TypeError(f"{fn}: {name} must be a number or a one-element tensor, got {type(value).__name__}{shape}.")


def query_keys(fn: str, query: Any, keys: Any) -> None:
    """query (D,) and keys (N, D) of one dtype."""
    vector(fn, "query", query)
    tensor(fn, "keys", keys, ndim=2)
    if keys.shape[1] != query.shape[0]:
        raise ValueError(
            f"{fn}: query has shape {_shape(query)} and keys has shape {_shape(keys)}; keys must be "
            f"(N, {query.shape[0]}): one row per key, as long as the query."
        )
    same_dtype(fn, query=query, keys=keys)


def top_k_count(fn: str, k: Any, n_keys: int) -> None:
    """k is an int with 1 <= k <= N."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"{fn}: k must be an int, got {type(k).__name__}.")
    if not 1 <= k <= n_keys:
        raise ValueError(f"{fn}: k={k} but there are {n_keys} keys; ask for 1 <= k <= {n_keys}.")


def matmul(fn: str, A: Any, B: Any) -> None:
    """A (M, K) and B (K, N): 2-D floating tensors of one dtype whose inner sizes agree."""
    tensor(fn, "A", A, ndim=2)
    tensor(fn, "B", B, ndim=2)
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"{fn}: A has shape {tuple(A.shape)} and B has shape {tuple(B.shape)}; A (M, K) @ B (K, N) "
            f"needs A's columns (K = {A.shape[1]}) to equal B's rows ({B.shape[0]})."
        )
    same_dtype(fn, A=A, B=B)
