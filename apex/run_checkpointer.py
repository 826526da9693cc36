"""The learner's writer of run checkpoints (apex.checkpointing has the format):
one periodic checkpoint every checkpoint.period_seconds and one at a stop,
each with the replay's Reverb checkpoint (every shard's), abandoned without
harm when the disk is full (apex.full_disk)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

from apex.checkpointing import (
    CheckpointError,
    checkpoints_dir,
    directory_bytes,
    latest_complete,
    replay_root,
    shard_dir,
    write,
)
from apex.full_disk import is_disk_full


class RunCheckpointer:
    """Writes run checkpoints from the learner's process.

    Args:
      run_dir: the run directory.
      manifest: from `make_manifest`.
      replay_client: a reverb.Client of the program's server (its checkpointer
        root must be `replay_root(run_dir)`), or a list of one per replay shard
        (shard s at index s; its root `replay_root(run_dir, s, S)`): every shard
        is checkpointed and the run checkpoint holds all of them.
      counters: returns the coordinator's counters (`Coordinator.checkpoint_state`).
      period_seconds: between periodic checkpoints (None: none).
      keep: complete checkpoints kept.
      on_written: called with (path, step, seconds, bytes, reason) after each checkpoint.
      log: where one line per checkpoint goes.
      on_abandoned: called with (step, reason, error) after a checkpoint a full
        disk cut short (apex.full_disk).
    """

    def __init__(
        self,
        run_dir: str,
        manifest: dict[str, Any],
        replay_client: Any,
        counters: Callable[[], dict[str, Any]],
        period_seconds: float | None,
        keep: int,
        on_written: Callable[[str, int, float, int, str], None] | None = None,
        log: Callable[[str], None] | None = None,
        on_abandoned: Callable[[int, str, str], None] | None = None,
    ):
        self._run_dir = run_dir
        self._manifest = manifest
        self._clients = (
            list(replay_client) if isinstance(replay_client, (list, tuple)) else [replay_client]
        )
        self._counters = counters
        self._period = period_seconds
        self._keep = keep
        self._on_written = on_written
        self._on_abandoned = on_abandoned
        self.abandoned = 0  # checkpoints a full disk cut short
        self._log = log or (lambda line: print(line, flush=True))
        self._last = time.time()
        self.written: list[tuple[str, float, int]] = []

    def due(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self._period is not None and now - self._last >= self._period

    def replace_client(self, shard: int, client: Any) -> None:
        """Shard `shard` listens elsewhere now (apex.coordination.moves): its part of
        every later checkpoint comes from `client`."""
        self._clients[shard] = client

    @staticmethod
    def _replay_checkpoint(client: Any, name: str = "replay") -> str:
        """A fresh Reverb checkpoint path of a live server, moved out of its root safely."""
        for _ in range(3):
            path = client.checkpoint()
            moved = path + ".apex"
            try:
                os.rename(path, moved)  # out of Reverb's reach: it prunes older dirs of its root
                return moved
            except FileNotFoundError:  # an inspection snapshot pruned it: write another
                continue
        raise CheckpointError(f"the {name} checkpoint kept disappearing from its root")

    def _replay_checkpoints(self) -> str | list[str]:
        """The Reverb checkpoint of the server (one path), or of every shard (a list,
        written in parallel; if one fails, the others are removed and the error
        names the shard)."""
        if len(self._clients) == 1:
            return self._replay_checkpoint(self._clients[0])
        num = len(self._clients)
        names = [shard_dir(s, num) for s in range(num)]
        with futures.ThreadPoolExecutor(num, thread_name_prefix="replay-checkpoint") as pool:
            jobs = [
                pool.submit(self._replay_checkpoint, c, n) for c, n in zip(self._clients, names)
            ]
            futures.wait(jobs)
        paths, failed = [], []
        for name, job in zip(names, jobs):
            err = job.exception()
            if err is None:
                paths.append(job.result())
            else:
                failed.append(f"{name}: {type(err).__name__}: {err}")
        if failed:
            for path in paths:
                shutil.rmtree(path, ignore_errors=True)
            raise CheckpointError(
                "the replay shards could not all be checkpointed (the run checkpoint needs "
                "every shard): " + "; ".join(failed)
            )
        return paths

    def _check_shards_answer(self) -> None:
        """With shards: refuses at once (CheckpointError naming them) when a shard's
        server does not answer, before the priority flush waits on it in vain."""
        if len(self._clients) == 1:
            return
        silent = []
        for s, client in enumerate(self._clients):
            try:
                client.server_info(timeout=2)
            except Exception as err:  # noqa: BLE001 - gone, or not answering
                silent.append(f"{shard_dir(s, len(self._clients))} ({type(err).__name__}: {err})")
        if silent:
            raise CheckpointError(
                "the run checkpoint needs every replay shard; not answering: " + ", ".join(silent)
            )

    def save(self, learner: Any, reason: str = "periodic") -> str | None:
        """Writes one checkpoint of `learner` (between its SGD steps) and the
        replay; returns its path. On a full disk the checkpoint is abandoned
        (what it had written removed, the last complete one untouched, one line
        said, `on_abandoned` called) and None returned; the next is due a
        period later."""
        start = time.time()
        step = int(learner.steps)
        try:
            return self._save(learner, reason, start)
        except Exception as err:
            if not is_disk_full(err):
                raise
            self._abandon(step, reason, err, start)
            return None

    def _save(self, learner: Any, reason: str, start: float) -> str:
        self._check_shards_answer()
        learner.flush_priorities()
        counters = dict(self._counters())
        step = int(learner.steps)
        counters["learner_steps"] = step
        replay = self._replay_checkpoints()
        state = learner.get_state()
        path = write(self._run_dir, step, state, counters, self._manifest, replay, self._keep)
        seconds = time.time() - start
        size = directory_bytes(path)
        self._last = time.time()
        self.written.append((path, seconds, size))
        self._log(
            f"[apex] checkpoint ({reason}) {os.path.relpath(path, self._run_dir)}: learner step "
            f"{step:,}, {size / 1e6:.1f} MB in {seconds:.2f} s"
        )
        if self._on_written is not None:
            try:
                self._on_written(path, step, seconds, size, reason)
            except Exception:  # noqa: BLE001 - a report must not lose the checkpoint
                pass
        return path

    def _abandon(self, step: int, reason: str, err: BaseException, start: float) -> None:
        """Removes what a checkpoint that met a full disk had written: its
        .partial directory and the Reverb checkpoints of this attempt (in the
        servers' roots, or moved out of them)."""
        folder = checkpoints_dir(self._run_dir)
        shutil.rmtree(os.path.join(folder, f"ckpt-{step:09d}.partial"), ignore_errors=True)
        num = len(self._clients)
        for shard in range(num):
            root = replay_root(self._run_dir, shard if num > 1 else None, num)
            for name in os.listdir(root) if os.path.isdir(root) else []:
                path = os.path.join(root, name)
                try:
                    fresh = os.path.getmtime(path) >= start - 1.0
                except OSError:
                    continue
                if fresh:
                    shutil.rmtree(path, ignore_errors=True)
        self._last = time.time()
        self.abandoned += 1
        error = " ".join(str(getattr(err, "strerror", None) or err).split())[:200]
        last = latest_complete(self._run_dir)
        kept = (
            f"{os.path.basename(last)} stays the last complete one" if last else "none is complete"
        )
        self._log(
            f"[apex] checkpoint ({reason}) at learner step {step:,} abandoned, the disk is full "
            f"({error}): {kept}; training goes on"
        )
        if self._on_abandoned is not None:
            try:
                self._on_abandoned(step, reason, error)
            except Exception:  # noqa: BLE001 - the report is best effort
                pass
