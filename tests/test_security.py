"""--isolate_network: the program trains in a private network namespace and none
of its ports is reachable from the host."""

import json
import os
import socket
import subprocess

import pytest

from tests.procs import STOP_TIMEOUT, kill_tree, read_in_background, start_train, wait_for_state

pytestmark = pytest.mark.integration

_UNSHARE_OK = subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _UNSHARE_OK, reason="unprivileged network namespaces are not allowed here")
@pytest.mark.timeout(180)
def test_isolated_run_trains_and_its_replay_port_is_not_reachable_from_the_host(tmp_path):
    run_dir = str(tmp_path / "run")
    # A budget in learner steps, not seconds: a loaded machine may take 25 s to
    # its first SGD step (a wall limit then stopped the run before it trained).
    proc, token = start_train(
        run_dir,
        "--isolate_network",
        "--config.stop.max_learner_steps=2000",
        "--config.stop.max_wall_seconds=None",
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
            assert s.connect_ex(("127.0.0.1", port)) != 0
        proc.wait(timeout=STOP_TIMEOUT)
        reader.join(timeout=STOP_TIMEOUT)
    finally:
        kill_tree(proc, token)
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:]
    assert "isolated network namespace: interfaces ['lo']" in out
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stop_reason"] == "max_learner_steps" and summary["learner_steps"] >= 2000
