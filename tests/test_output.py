"""What a user reads: whole lines in a pipe, no colour codes or carriage
returns off a terminal, library noise filtered, node logs in RUN_DIR/logs.
(A real run through a pipe, with its one summary equal to summary.json:
tests/test_local_mp.py; exit codes: tests/test_checkpoint.py.)"""

import os
import subprocess
import sys

import pytest

from apex.output import FilteredStdout, LineFilter


def test_lines_split_across_reads_come_out_whole_and_prefixed():
    f = LineFilter("[actor/0] ")
    assert f.feed(b"first li") == []
    assert f.feed(b"ne\nsecond\nthi") == [b"[actor/0] first line\n", b"[actor/0] second\n"]
    assert f.flush() == [b"[actor/0] thi\n"]


def test_off_a_terminal_colour_codes_go_and_apex_lines_keep_no_node_prefix():
    f = LineFilter("[coordinator/0] ", colour=33, tty=False)
    out = f.feed(b"\x1b[1;33m[apex 5.0s] env_steps 10\x1b[0;0m\nplain\n")
    assert out == [b"[apex 5.0s] env_steps 10\n", b"[coordinator/0] plain\n"]


def test_on_a_terminal_the_prefix_is_coloured():
    (line,) = LineFilter("[learner/0] ", colour=36, tty=True).feed(b"x\n")
    assert line == b"\x1b[1;36m[learner/0] \x1b[0mx\n"


def test_launchpads_carriage_return_countdown_becomes_one_line_and_nodes_drop_theirs():
    launcher = LineFilter()
    text = b"Waiting for workers to stop for 28s.\rWaiting for workers to stop for 27s.\r"
    assert launcher.feed(text) == [b"Waiting for the nodes to stop (at most 28 s)\n"]
    assert LineFilter("[actor/0] ").feed(text) == []


def test_noise_is_dropped_unless_every_line_is_kept():
    noise = (
        b"I1201 14:36:53.198234 1 node.py:62] Reverb client connecting to: localhost:1\n"
        b"[reverb/cc/x.cc:1] Sampler and server are owned by the same process (1)\n"
        b"User-requested termination. Asking workers to stop.\n"
        b"The number of pending items is alarmingly high, did you forget to call Flush?\n"
    )
    assert LineFilter("[n] ").feed(noise) == []
    assert len(LineFilter("[n] ", keep_all=True).feed(noise)) == 4
    assert LineFilter("[n] ").feed(b"ValueError: boom\n") == [b"[n] ValueError: boom\n"]


def test_the_launchers_stdout_writes_each_line_with_one_write(tmp_path):
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    out = FilteredStdout(fd)
    out.write("[apex] a")
    out.write("bc\n[apex] d\n")
    out.close()
    os.close(fd)
    assert path.read_text() == "[apex] abc\n[apex] d\n"


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_output_to_files_writes_one_log_per_node_into_the_run_dir(tmp_path):
    from tests.procs import run_train

    run_dir = str(tmp_path / "run")
    out, summary, _ = run_train(
        run_dir,
        "--terminal=output_to_files",
        "--config.stop.max_wall_seconds=None",
        "--config.stop.max_actor_steps=5000",
        timeout=240,
    )
    logs = os.path.join(run_dir, "logs")
    assert f"node output: {logs}" in out
    names = sorted(
        os.path.relpath(os.path.join(d, f), logs) for d, _, files in os.walk(logs) for f in files
    )
    assert names == ["actor/0", "actor/1", "coordinator/0", "learner/0"], names
    with open(os.path.join(logs, "coordinator/0")) as f:
        assert "stopping: max_actor_steps" in f.read()


def test_output_goes_on_being_drained_after_its_reader_is_gone():
    """`train.sh | tee log` with tee killed: the node-output filter keeps reading
    its node to the end (the node never blocks or breaks) and exits with the
    node's own code; the launcher's streams drop output instead of raising."""

    from apex.output import TolerantStream
    from tests.procs import ROOT

    node = "import sys\nfor i in range(20000): print('line', i)\nsys.exit(3)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.node_output", "n", "32", "--", sys.executable, "-c", node],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    proc.stdout.close()  # the reader is gone before the node writes
    assert proc.wait(timeout=120) == 3  # the node ran to its end: its own exit code

    r, w = os.pipe()
    os.close(r)
    out = FilteredStdout(w)
    assert out.write("after the reader left\n") == len("after the reader left\n")
    out.close()
    os.close(w)
    closed = open(os.devnull, "w")  # noqa: SIM115 - closed right away on purpose
    closed.close()
    assert TolerantStream(closed).write("x") == 1
