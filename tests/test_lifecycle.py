"""The stop window's ordering, the restart policy and the no-shared-filesystem guard."""

import os
import subprocess
import sys

import pytest

from apex.lifecycle import STOP_WINDOW, StopWindow
from apex.restart import MAX_BACKOFF_SECONDS, RECOVERED_AFTER_SECONDS, decide_restart


def test_the_shipped_stop_window_holds_its_ordering():
    assert STOP_WINDOW.violations() == []
    # The replay outlives the learner's final checkpoint and still ends before the kill.
    assert STOP_WINDOW.replay_grace + 0.5 + STOP_WINDOW.final_checkpoint_wait < (
        STOP_WINDOW.kill_seconds
    )
    assert STOP_WINDOW.checkpoint_budget >= 5.0


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"kill_seconds": 10.0}, "before the kill"),
        ({"actor_drain": 20.0}, "final checkpoint"),
        ({"stack_dump_after": 7.0}, "stack_dump_after"),
    ],
)
def test_a_window_that_cuts_the_final_checkpoint_is_refused_naming_the_ordering(changes, named):
    window = StopWindow(**changes)
    with pytest.raises(ValueError, match=named):
        window.check()


def test_restart_backoff_doubles_up_to_its_cap_then_gives_up_past_max_restarts():
    backoff, waits = 1.0, []
    for restarts in range(1, 8):
        d = decide_restart(restarts, backoff, ran_seconds=1.0, base_backoff=1.0, max_restarts=7)
        assert d.restart
        waits.append(d.wait)
        backoff = d.next_backoff
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS]
    assert not decide_restart(8, backoff, 1.0, 1.0, max_restarts=7).restart


def test_a_life_that_ran_long_enough_backs_off_from_the_start_again():
    d = decide_restart(3, 16.0, RECOVERED_AFTER_SECONDS + 1, base_backoff=0.5, max_restarts=10)
    assert d.restart and d.wait == 0.5 and d.next_backoff == 1.0


def test_zero_backoff_restarts_at_once_every_time():
    d = decide_restart(2, 0.0, 0.1, base_backoff=0.0, max_restarts=5)
    assert d.restart and d.wait == 0.0 and d.next_backoff == 0.0


def test_the_no_shared_fs_guard_refuses_writes_under_the_run_dir_and_allows_reads(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    outside = tmp_path / "elsewhere.txt"
    script = f"""
import os
from apex.lifecycle import forbid_writes_under
forbid_writes_under({str(run_dir)!r})
print(open({str(run_dir / "config.json")!r}).read())
open({str(outside)!r}, "w").write("ok")
for attempt in (
    lambda: open({str(run_dir / "x.json")!r}, "w"),
    lambda: os.open({str(run_dir / "y")!r}, os.O_WRONLY | os.O_CREAT),
    lambda: os.mkdir({str(run_dir / "d")!r}),
    lambda: os.remove({str(run_dir / "config.json")!r}),
):
    try:
        attempt()
        print("allowed")
    except PermissionError as err:
        print("refused", "APEX_CHECK_NO_SHARED_FS" in str(err))
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[0] == "{}"
    assert lines[1:] == ["refused", "True"] * 4
    assert outside.read_text() == "ok"
    assert sorted(os.listdir(run_dir)) == ["config.json"]


def test_the_launcher_watchdog_stops_the_node_even_when_its_output_is_gone():
    """A node whose launcher died, and with it the reader of the node's output
    (a broken pipe): the watchdog's SIGTERM still comes (its message is dropped)."""
    import subprocess
    import sys

    from tests.procs import ROOT

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that is gone
    script = (
        "import signal\n"
        "from apex import lifecycle\n"
        "signal.signal(signal.SIGPIPE, signal.SIG_IGN)\n"
        f"lifecycle.start_launcher_watchdog({dead.pid}, period=0.1)\n"
        "signal.pause()  # a node at work, until a signal ends it\n"
    )
    node = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    node.stdout.close()  # the reader is gone before the watchdog prints
    assert node.wait(timeout=60) == -15
