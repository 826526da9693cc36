"""The metrics writers are Acme loggers: Acme's filters and dispatchers wrap them."""

import os

import pytest
from acme.utils import loggers

from apex.metrics import MetricsWriter, RemoteMetrics, read_jsonl


def test_metrics_writer_under_acme_filters_and_dispatcher(tmp_path):
    run_dir = str(tmp_path)
    writer = MetricsWriter(run_dir, "learner", "learner/steps", tensorboard=False)
    assert isinstance(writer, loggers.Logger)
    logger = loggers.Dispatcher([loggers.NoneFilter(writer), loggers.InMemoryLogger()])
    logger.write({"learner/steps": 3, "learner/loss": 0.5, "learner/unset": None})
    logger.close()
    rows = read_jsonl(os.path.join(run_dir, "metrics", "learner.jsonl"))
    assert len(rows) == 1
    assert rows[0]["learner/steps"] == 3 and rows[0]["learner/loss"] == 0.5
    assert "learner/unset" not in rows[0]  # Acme's NoneFilter dropped it


def test_remote_metrics_is_an_acme_logger_sending_rows_to_the_coordinator():
    sent = []

    class Coordinator:  # the one RPC RemoteMetrics calls
        def write_metrics(self, component, step_key, row):
            sent.append((component, step_key, row))

    remote = RemoteMetrics(Coordinator(), "actor_0", "actor/env_steps")
    assert isinstance(remote, loggers.Logger)
    loggers.KeyFilter(remote, keep=("actor/env_steps",)).write(
        {"actor/env_steps": 10, "actor/other": 1}
    )
    assert len(sent) == 1 and sent[0][:2] == ("actor_0", "actor/env_steps")
    assert sent[0][2]["actor/env_steps"] == 10 and "actor/other" not in sent[0][2]


def test_events_files_read_back_in_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = MetricsWriter(str(tmp_path), "learner", "learner/steps")
    for step in (1, 2, 3):
        writer.write({"learner/steps": step, "learner/loss": 0.5 / step})
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard" / "learner"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("learner/loss")] == [
        (1, 0.5),
        (2, 0.25),
        (3, pytest.approx(0.5 / 3)),
    ]


def test_a_full_disk_drops_rows_said_once_keeps_whole_rows_and_writes_again(tmp_path, capsys):
    """On a small tmpfs: rows fill it; while it is full rows are dropped (one
    line says so), the files keep only whole rows, and once space returns the
    rows (and TensorBoard events) are written again (a line says so)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from apex.full_disk import FULL_DISK
    from tests.procs import fill, small_filesystem

    with small_filesystem(str(tmp_path / "fs"), "256k") as fs:
        writer = MetricsWriter(fs, "learner", "learner/steps")
        filler = os.path.join(fs, "filler")
        fill(filler)  # the disk is full now
        step = 0
        for _ in range(20):
            step += 1
            writer.write({"learner/steps": step, "learner/loss": float(step), "x": "y" * 300})
        assert FULL_DISK.is_full("learner metrics")
        os.remove(filler)  # space returns
        for _ in range(3):
            step += 1
            writer.write({"learner/steps": step, "learner/loss": float(step)})
        writer.close()
        out = capsys.readouterr().out
        rows = read_jsonl(os.path.join(fs, "metrics", "learner.jsonl"))
        with open(os.path.join(fs, "metrics", "learner.jsonl")) as f:
            lines = f.read().splitlines()
        acc = EventAccumulator(os.path.join(fs, "tensorboard", "learner"))
        acc.Reload()
        events = [e.step for e in acc.Scalars("learner/loss")]
    assert out.count("[apex] disk full: learner metrics not written (No space left on device)") == 1
    assert "[apex] learner metrics written again after" in out, out
    assert len(lines) == len(rows)  # whole rows only
    assert [r["learner/steps"] for r in rows][-3:] == [step - 2, step - 1, step]
    assert len(rows) < step  # some were dropped
    assert events[-3:] == [step - 2, step - 1, step]
    assert not FULL_DISK.is_full("learner metrics")
