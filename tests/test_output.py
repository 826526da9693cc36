"""What a user reads: whole lines in a pipe, no colour codes or carriage
returns off a terminal, library noise filtered. (A real run through a pipe,
with its one summary equal to summary.json: tests/test_learning.py; node logs
in RUN_DIR/logs: tests/test_security.py; exit codes: tests/test_checkpoint.py.)"""

import os
import subprocess
import sys

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
