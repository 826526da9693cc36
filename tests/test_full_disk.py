"""A run directory on a filesystem that fills: a real local_mp program on a small
tmpfs made by the test. Its own checkpoints fill the disk (abandoned, the last
complete one kept), then the rest is filled (metrics rows and heartbeat files
dropped, said once), training goes on throughout, and when space returns
everything is written again; the last complete checkpoint loads and the
summary names the episodes."""

from __future__ import annotations

import json
import os
import re

import pytest

from apex import checkpointing
from tests.procs import (
    STARTUP_TIMEOUT,
    STOP_TIMEOUT,
    fill,
    kill_tree,
    read_in_background,
    small_filesystem,
    start_train,
    wait_until,
    wait_until_gone,
)

_STEPS = re.compile(r"learner_steps ([\d,]+)")
_ABANDONED = re.compile(r"at learner step ([\d,]+) abandoned, the disk is full")


def _learner_steps(lines: list[str]) -> int:
    """The learner steps of the last progress line (0 before the first)."""
    for line in reversed(lines):
        m = _STEPS.search(line)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0


@pytest.mark.integration
@pytest.mark.timeout(480)
def test_a_filling_disk_stops_nothing_and_loses_no_complete_checkpoint(tmp_path):
    # 12 MB: with 6.5 MB taken, the run's third checkpoint does not fit; without
    # it, three of the replay's full size (3.4 MB each) and the metrics do.
    with small_filesystem(str(tmp_path / "fs"), "12m") as fs:
        filler = os.path.join(fs, "filler")
        with open(filler, "wb") as f:  # the run's own files fill the rest
            f.write(b"\0" * 6_500_000)
        run_dir = os.path.join(fs, "run")
        proc, token = start_train(
            run_dir,
            "--config.checkpoint.period_seconds=1",
            "--config.stop.max_wall_seconds=400",
            "--config.logging.progress_period_seconds=1",
        )
        lines, reader = read_in_background(proc)
        text = lambda: "".join(lines)  # noqa: E731 - the output so far
        try:
            # Its checkpoints fill the disk: one is abandoned, the last complete one stays.
            wait_until(
                lambda: "abandoned, the disk is full" in text(),
                STARTUP_TIMEOUT,
                lambda: f"a checkpoint the disk cut short; output: {text()[-3000:]}",
            )
            kept = checkpointing.latest_complete(run_dir)
            assert kept is not None, text()[-3000:]
            steps = _learner_steps(lines)
            # The rest of the disk filled: metrics rows are dropped, training goes on.
            fill(os.path.join(fs, "filler2"))
            wait_until(
                lambda: "[apex] disk full: coordinator metrics not written" in text(),
                STARTUP_TIMEOUT,
                lambda: f"the metrics' disk-full line; output: {text()[-3000:]}",
            )
            wait_until(
                lambda: _learner_steps(lines) > steps + 200,
                STARTUP_TIMEOUT,
                lambda: f"training to go on; output: {text()[-3000:]}",
            )
            # Space returns: rows and checkpoints are written again.
            os.remove(filler)
            os.remove(os.path.join(fs, "filler2"))
            wait_until(
                lambda: "[apex] coordinator metrics written again after" in text(),
                STARTUP_TIMEOUT,
                lambda: f"the metrics written again; output: {text()[-3000:]}",
            )
            cut_short = max(int(s.replace(",", "")) for s in _ABANDONED.findall(text()))

            def newer() -> bool:
                latest = checkpointing.latest_complete(run_dir)
                return int(os.path.basename(latest).split("-")[1]) > cut_short

            wait_until(
                newer,
                STARTUP_TIMEOUT,
                lambda: f"a complete checkpoint after the last cut short; output: {text()[-3000:]}",
            )
            proc.terminate()
            proc.wait(timeout=STOP_TIMEOUT)
            reader.join(timeout=STOP_TIMEOUT)
            wait_until_gone(token)
        finally:
            kill_tree(proc, token)
        out = text()
        assert proc.returncode == 143, out[-3000:]
        assert out.count("[apex] disk full: coordinator metrics not written") == 1, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        final = checkpointing.load(checkpointing.latest_complete(run_dir))
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        leftovers = [n for n in os.listdir(checkpointing.checkpoints_dir(run_dir)) if "." in n]
    assert final.step > int(os.path.basename(kept).split("-")[1])
    episodes = summary["disk_full"]
    for what in ("checkpoints", "coordinator metrics"):  # each ended: space returned
        mine = [e for e in episodes if e["what"] == what]
        assert mine and all("until" in e for e in mine), episodes
        assert sum(e["dropped"] for e in mine) >= 1, episodes
        assert "No space left on device" in mine[0]["error"], episodes
    assert leftovers == [], leftovers  # no half-written checkpoint left behind
