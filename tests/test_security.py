"""--isolate_network: the program trains in a private network namespace and none
of its ports is reachable from the host. The same run writes its nodes' output
into RUN_DIR/logs (--terminal=output_to_files)."""

import json
import os
import socket
import subprocess

import pytest

from tests.procs import (
    STOP_TIMEOUT,
    assert_start_lines,
    kill_tree,
    read_in_background,
    start_train,
    wait_for_state,
)

pytestmark = pytest.mark.integration

_UNSHARE_OK = subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.timeout(180)
def test_isolated_run_trains_and_its_replay_port_is_not_reachable_from_the_host(tmp_path):
    # Where unprivileged network namespaces are refused, the run goes on without
    # --isolate_network and checks only its node logs (and says so).
    if not _UNSHARE_OK:
        print("unprivileged network namespaces are not allowed here: node logs only")
    run_dir = str(tmp_path / "run")
    # A budget in learner steps, not seconds: a loaded machine may take 25 s to
    # its first SGD step (a wall limit then stopped the run before it trained).
    proc, token = start_train(
        run_dir,
        *(["--isolate_network"] if _UNSHARE_OK else []),
        "--config.stop.max_learner_steps=2000",
        "--config.stop.max_wall_seconds=None",
        "--terminal=output_to_files",  # and its nodes' output goes to RUN_DIR/logs
    )
    lines, reader = read_in_background(proc)  # a full pipe would hold the program
    try:
        try:  # the replay serves the learner: its port is open inside the namespace
            wait_for_state(run_dir, lambda s: (s.get("learner_steps") or 0) >= 1, timeout=120)
        except AssertionError as err:
            raise AssertionError(f"{err}\noutput so far:\n{''.join(lines)[-4000:]}") from None
        with open(os.path.join(run_dir, "replay_address")) as f:
            port = int(f.read().strip().rsplit(":", 1)[1])
        with socket.socket() as s:  # from the host namespace: nothing listens there
            assert s.connect_ex(("127.0.0.1", port)) != 0 or not _UNSHARE_OK
        proc.wait(timeout=STOP_TIMEOUT)
        reader.join(timeout=STOP_TIMEOUT)
    finally:
        kill_tree(proc, token)
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:]
    assert "isolated network namespace: interfaces ['lo']" in out or not _UNSHARE_OK
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stop_reason"] == "max_learner_steps" and summary["learner_steps"] >= 2000
    # --terminal=output_to_files: one log per node, in the run directory.
    logs = os.path.join(run_dir, "logs")
    assert f"node output: {logs}" in out
    names = sorted(
        os.path.relpath(os.path.join(d, f), logs) for d, _, files in os.walk(logs) for f in files
    )
    assert names == ["actor/0", "actor/1", "coordinator/0", "learner/0"], names
    with open(os.path.join(logs, "coordinator/0")) as f:
        coordinator_log = f.read()
    assert "stopping: max_learner_steps" in coordinator_log
    # No silent start, in a file too: the start lines, whole and in order.
    assert_start_lines(coordinator_log, actors=2)
