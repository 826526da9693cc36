"""Checksums of a checkpoint's files: sha256.json beside them, written before
the checkpoint is marked complete and verified when it is read; and the
setting aside of a checkpoint whose files do not match (apex.checkpointing)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence

from apex.errors import CorruptCheckpointError
from apex.jsonio import write_json_atomic

CHECKSUMS_FILE = "sha256.json"
DAMAGED_SUFFIX = ".damaged"


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: str, skip: Sequence[str]) -> list[str]:
    """Every file under `folder` (relative, sorted) but the checksums and `skip`."""
    out = []
    for root, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel != CHECKSUMS_FILE and rel not in skip:
                out.append(rel)
    return sorted(out)


def write_checksums(folder: str, skip: Sequence[str] = ()) -> None:
    """FOLDER/sha256.json: the SHA-256 of every file under `folder` but `skip`
    (written before the caller marks the folder complete)."""
    sums = {rel: _sha256(os.path.join(folder, rel)) for rel in _files(folder, skip)}
    write_json_atomic(os.path.join(folder, CHECKSUMS_FILE), {"sha256": sums})


def verify(path: str, skip: Sequence[str] = ()) -> None:
    """Checks every file of checkpoint `path` (but `skip`) against its sha256.json.

    Raises CorruptCheckpointError naming the first file that is missing, added or
    whose bytes differ. A checkpoint written before checksums existed (no
    sha256.json) passes.
    """
    listed = os.path.join(path, CHECKSUMS_FILE)
    if not os.path.exists(listed):
        return
    try:
        with open(listed) as f:
            sums = json.load(f)["sha256"]
    except Exception as err:  # noqa: BLE001 - a damaged list is a damaged checkpoint
        raise CorruptCheckpointError(
            f"{path} is corrupt: {CHECKSUMS_FILE} does not read ({type(err).__name__}: {err})"
        ) from None
    present = set(_files(path, skip))
    for rel, expected in sorted(sums.items()):
        if rel not in present:
            raise CorruptCheckpointError(f"{path} is corrupt: {rel} is missing")
        actual = _sha256(os.path.join(path, rel))
        if actual != expected:
            raise CorruptCheckpointError(
                f"{path} is corrupt: {rel} does not match its checksum "
                f"(sha256 {actual[:12]}..., recorded {expected[:12]}...)"
            )
    extra = sorted(present - set(sums))
    if extra:
        raise CorruptCheckpointError(f"{path} is corrupt: {extra[0]} was not in it when written")


def set_aside(path: str) -> str:
    """Renames a damaged checkpoint to ckpt-N.damaged (never loaded, never
    deleted by `keep`, kept for a person to look at); returns the new path."""
    target = os.path.normpath(path) + DAMAGED_SUFFIX
    n = 1
    while os.path.exists(target):
        n += 1
        target = f"{os.path.normpath(path)}{DAMAGED_SUFFIX}.{n}"
    os.rename(path, target)
    return target
