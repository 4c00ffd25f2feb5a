"""Files written whole: a JSON file replaced by rename, so a reader never sees half of it and a crash leaves the old
one in place."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["write_json"]


def write_json(path: Path, data: Any, *, mode: int) -> Path:
    """Write `data` as indented JSON to a temporary file beside `path`, set its `mode`, and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
