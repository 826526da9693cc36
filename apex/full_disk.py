"""Writes that a full disk must not stop.

A run directory on a filesystem that fills (ENOSPC, or EDQUOT past a quota)
refuses the run's files: metrics rows, TensorBoard events, heartbeat files,
state.json, checkpoints. Training does not need any of them to go on, so a
node that meets a full disk says so once per kind of write, drops those
writes while the disk stays full, and says so again when one succeeds:

    [apex] disk full: learner metrics not written (No space left on device); dropped until space returns, training goes on
    [apex] learner metrics written again after 41 s (39 dropped while the disk was full)

`FULL_DISK` is this process's record; its `episodes` (what, since, until,
dropped, error) go into summary.json's `disk_full` (the coordinator's
process, after those of the run's earlier lives: `episodes_before`) and a checkpoint that could not be written is abandoned
(apex.run_checkpointer.RunCheckpointer), never at the cost of the last complete one.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXTS = ("No space left on device", "Disk quota exceeded")


def is_disk_full(err: BaseException) -> bool:
    """Whether `err` says the disk is full: an OSError with ENOSPC or EDQUOT, or
    an error of a native library (Reverb, TensorFlow) whose text says so.

    Example:
        >>> is_disk_full(OSError(28, "No space left on device"))
        True
    """
    if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
        return True
    return any(text in str(err) for text in _NO_SPACE_TEXTS)


class FullDisk:
    """One process's writes refused by a full disk, by kind of write ('what').

    Args:
      out: where its lines go (default: sys.stdout at the time of writing).
      quiet: keep the episodes without saying anything (another process said it).
    """

    def __init__(self, out: TextIO | None = None, quiet: bool = False):
        self._out = out
        self._quiet = quiet
        self._lock = threading.Lock()
        self._open: dict[str, dict[str, Any]] = {}
        self.episodes: list[dict[str, Any]] = []

    def _say(self, line: str) -> None:
        if self._quiet:
            return
        out = self._out or sys.stdout
        try:
            print(line, file=out, flush=True)
        except (OSError, ValueError):  # a closed or full output: the record stays
            pass

    def failed(self, what: str, err: BaseException) -> None:
        """A write of `what` was refused for want of space."""
        with self._lock:
            episode = self._open.get(what)
            first = episode is None
            if first:
                text = " ".join(str(getattr(err, "strerror", None) or err).split())[:200]
                episode = {"what": what, "since": time.time(), "dropped": 0, "error": text}
                self._open[what] = episode
                self.episodes.append(episode)
            episode["dropped"] += 1
        if first:
            self._say(
                f"[apex] disk full: {what} not written ({episode['error']}); dropped until "
                "space returns, training goes on"
            )

    def wrote(self, what: str) -> None:
        """A write of `what` succeeded (ends its episode, if one is open)."""
        if not self._open:  # the common case: nothing to end
            return
        with self._lock:
            episode = self._open.pop(what, None)
            if episode is None:
                return
            episode["until"] = time.time()
        self._say(
            f"[apex] {what} written again after {episode['until'] - episode['since']:.0f} s "
            f"({episode['dropped']} dropped while the disk was full)"
        )

    def is_full(self, what: str) -> bool:
        """Whether the last write of `what` was refused."""
        return what in self._open

    def guard(self, what: str, write: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Calls write(*args, **kwargs); True if it wrote. A full disk is
        recorded and returns False; any other error is raised."""
        try:
            write(*args, **kwargs)
        except Exception as err:
            if not is_disk_full(err):
                raise
            self.failed(what, err)
            return False
        self.wrote(what)
        return True

    def figures(self) -> list[dict[str, Any]]:
        """A copy of the episodes, oldest first (summary.json's `disk_full`)."""
        with self._lock:
            return [dict(e) for e in self.episodes]


def episodes_before(run_dir: str) -> list[dict[str, Any]]:
    """The disk-full episodes of the run's earlier lives (a program restart or a
    resume), as its last summary.json holds them; [] for a new run, or when
    that file cannot be read."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            episodes = json.load(f).get("disk_full")
    except (OSError, ValueError, AttributeError):
        return []
    return [dict(e) for e in episodes if isinstance(e, dict)] if isinstance(episodes, list) else []


FULL_DISK = FullDisk()
"""This process's record (every writer of the run directory reports here)."""
