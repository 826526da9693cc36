"""Small JSON helpers shared by the run directory writers."""

from __future__ import annotations

import json
import os
import threading
from typing import Any


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Writes JSON to `path` through a temporary file and a rename (never
    half-written; a write that fails, e.g. on a full disk, leaves `path` as it
    was and no temporary file)."""
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
