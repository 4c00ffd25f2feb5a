"""The machine and the runtimes: what this computer is, and MLX when it is installed."""

from __future__ import annotations

import os
import platform
from types import ModuleType

import numpy as np
import torch

__all__ = ["mlx", "machine", "to_mlx"]


def mlx(purpose: str = "this cell") -> ModuleType | None:
    """`mlx.core` if MLX is installed; otherwise None, after saying what `purpose` would have shown.

    MLX runs on Apple silicon and, as `mlx[cpu]`, on Linux. Intel Macs and Windows have no wheel.
    """
    try:
        import mlx.core as mx
    except ImportError as err:
        print(
            f"MLX is not available on this machine ({platform.system()} {platform.machine()}: {err}).\n"
            f"Skipping {purpose}; on Apple silicon or Linux with the course environment it runs as written."
        )
        return None
    return mx


def to_mlx(t: torch.Tensor):
    """A torch CPU tensor as an MLX array with the same values and dtype (via NumPy, no copy on the torch side)."""
    import mlx.core as mx

    return mx.array(t.detach().cpu().numpy())


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, str]:
    """What this computer and the course's runtimes are (printed by lessons beside every measured number)."""
    info = {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch BLAS": "MKL" if torch.backends.mkl.is_available() else "other (no MKL)",
        "numpy": np.__version__,
    }
    try:
        import mlx.core as mx

        # mlx.core has __version__ at run time; its stubs leave it out
        info["mlx"] = f"{mx.__version__} ({mx.default_device()})"  # pyright: ignore[reportAttributeAccessIssue]
    except ImportError:
        info["mlx"] = "not installed"
    return info
