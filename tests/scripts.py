"""The project's scripts and docs builder, imported by path for the tests (scripts/ and docs/ are not packages)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from twoprim.config import ROOT


def load(relative: str) -> ModuleType:
    """`scripts/bench_hub.py` and the like as a module (`scripts_bench_hub`), once per process (its dataclasses look
    their module up in sys.modules)."""
    path = ROOT / relative
    name = f"{path.parent.name}_{path.stem}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"{path} cannot be imported"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
