"""What a user reads: whole lines, promptly, the same on a terminal, in a pipe
and in a file; library noise filtered unless asked for.

Launchpad's local_mp runs every node behind `decorate_output`, a bash + sed
pipeline: sed block-buffers when its output is not a terminal (progress
arrives in one lump at the end), writes colour codes into files, and lines of
different nodes are spliced mid-line. apex runs each node behind
`launch/node_output.py` instead, which uses `LineFilter` below: it splits on
newlines (and the carriage returns of Launchpad's countdown), writes each
whole line with one write() (atomic for lines under PIPE_BUF on a pipe), drops
known noise, and colours the node's prefix only on a terminal. The launcher's
own stdout goes through the same filter.

`APEX_VERBOSE=1` (`launch.train --verbose`) keeps every line.
"""

from __future__ import annotations

import os
import re
from typing import Any

VERBOSE_ENV = "APEX_VERBOSE"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Lines a user cannot act on: each is progress of a library, or a warning apex
# already handles (each with why it is safe to drop).
NOISE = tuple(
    re.compile(p)
    for p in (
        r"Reverb client connecting to",  # absl INFO of Launchpad's Reverb handle, per node
        r"Sampler and server are owned by the same process",  # the colocated replay: on purpose
        r"The number of pending items is alarmingly high",  # writers flush at a stop: bounded
        r"Loading latest checkpoint from",  # Reverb's checkpointer at start; apex says 'resuming'
        r"Initializing TFRecordCheckpointer",
        r"^Logs are being output to: |^Logging to: ",  # output_to_files: apex names RUN_DIR/logs
        r"User-requested termination\. Asking workers to stop",  # apex prints its own stop line
        r"Press CTRL\+C to terminate immediately",
        r"^\[reverb/cc/[^\]]*\] (Started replay server|Shutting down replay server|"
        r"Creating checkpoint|Reverb server|Server shutdown)",
        r"generated new fontManager",  # matplotlib's first-import cache
        r"^\[reverb/cc/[^\]]*\] Stored checkpoint to",  # apex names its checkpoints itself
        r"^\s*$",  # blank lines (\r-joined countdown residue)
    )
)
_COUNTDOWN = re.compile(r"Waiting for workers to stop for (\d+)(\.\d+)?s\.")


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


class LineFilter:
    """Turns a byte stream into filtered, whole, prefixed lines.

    Args:
      prefix: put before every line (e.g. '[actor/0] '); lines that already
        start with '[apex' (apex's own progress and summary) keep no prefix.
      colour: an ANSI colour code for the prefix, used only if `tty`.
      tty: whether the output is a terminal (colour codes and carriage
        returns are kept only then).
      keep_all: keep every line (no noise filter).
    """

    def __init__(
        self, prefix: str = "", colour: int | None = None, tty: bool = False, keep_all: bool = False
    ):
        self._prefix = prefix
        self._colour = colour if tty else None
        self._tty = tty
        self._keep_all = keep_all
        self._pending = b""
        self._countdown_said = False

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines `data` finishes, filtered and formatted (each ends in '\\n')."""
        self._pending += data
        parts = re.split(rb"\r\n|\n|\r", self._pending)
        self._pending = parts.pop()
        return [line for p in parts if (line := self.format(p)) is not None]

    def flush(self) -> list[bytes]:
        """What is left (a last line without a newline)."""
        rest, self._pending = self._pending, b""
        line = self.format(rest) if rest else None
        return [line] if line is not None else []

    def format(self, raw: bytes) -> bytes | None:
        text = raw.decode("utf-8", errors="replace")
        plain = _ANSI.sub("", text)
        if not self._keep_all:
            countdown = _COUNTDOWN.search(plain)
            if countdown:
                if (
                    self._countdown_said or self._prefix
                ):  # a node's own countdown: the launcher's says it
                    return None
                self._countdown_said = True
                plain = text = f"Waiting for the nodes to stop (at most {countdown.group(1)} s)"
            elif any(p.search(plain) for p in NOISE):
                return None
        body = text if self._tty else plain
        if plain.startswith("[apex") or not self._prefix:
            return (body + "\n").encode()
        prefix = self._prefix
        if self._colour is not None:
            prefix = f"\x1b[1;{self._colour}m{prefix}\x1b[0m"
        return (prefix + body + "\n").encode()


def write_lines(fd: int, lines: list[bytes]) -> bool:
    """Writes each line to `fd`; False once the reader is gone (EPIPE, or the
    descriptor is closed): the caller then drops its output and carries on, since a
    program must stop in order even after `| tee` or a CI log reader has died."""
    for line in lines:
        try:
            os.write(fd, line)
        except OSError:
            return False
    return True


class FilteredStdout:
    """A text stream for the launcher's sys.stdout: every line through LineFilter,
    written to file descriptor `fd` with one write() per line. Once the reader is
    gone, output is dropped instead of raising (see write_lines)."""

    def __init__(self, fd: int = 1, keep_all: bool = False):
        self._fd = fd
        self._tty = os.isatty(fd)
        self._filter = LineFilter(tty=self._tty, keep_all=keep_all)
        self._gone = False
        self.encoding = "utf-8"
        self.errors = "replace"

    def write(self, text: str) -> int:
        lines = self._filter.feed(text.encode("utf-8", errors="replace"))
        if not self._gone:
            self._gone = not write_lines(self._fd, lines)
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        lines = self._filter.flush()
        if not self._gone:
            self._gone = not write_lines(self._fd, lines)

    def isatty(self) -> bool:
        return self._tty

    def fileno(self) -> int:
        return self._fd

    def __getattr__(self, name: str) -> Any:  # e.g. .buffer for code that asks
        raise AttributeError(name)


class TolerantStream:
    """Wraps a text stream (the launcher's sys.stderr) so that writing to it once
    its reader is gone is a no-op instead of an error in the middle of a stop."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):  # EPIPE, or a closed file
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
