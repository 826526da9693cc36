"""launch/zygote.py: the fork server local_mp starts its nodes from."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from launch.zygote import Zygote, ZygoteError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sleeping_thread() -> None:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()


@pytest.mark.timeout(60)
def test_a_zygote_with_a_thread_more_than_it_started_with_refuses_to_fork(tmp_path):
    zygote = Zygote.start(on_start=_sleeping_thread)
    try:
        fd = os.open(str(tmp_path / "out"), os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(ZygoteError, match=r"has 2 threads, 1 when it started"):
                zygote.fork_node({"mode": "file"}, [fd])
        finally:
            os.close(fd)
    finally:
        zygote.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(zygote.pid, os.WNOHANG)  # closed: it exited and was reaped


# In a process of its own: a node runs Launchpad's WorkerManager, which reads
# Launchpad's absl flags (parsed there, as in launch.train).
_NODES = textwrap.dedent(
    """
    import json, os, sys
    from absl import flags
    from apex import compat
    compat.define_launchpad_flags()
    compat.import_launchpad()
    flags.FLAGS(["x"])
    import cloudpickle
    from launch.zygote import Zygote, thread_count

    def hello():
        print("hello from", os.environ["GREETING"], "pid", os.getpid(), "threads", thread_count())

    def fails():
        raise SystemExit(3)

    data = sys.argv[1] + "/job.pkl"
    with open(data, "wb") as f:
        cloudpickle.dump([hello, fails], f)
    zygote = Zygote.start()
    pids = []
    for task, mode in ((0, "lines"), (1, "file")):
        spec = {"title": f"node/{task}", "mode": mode, "colour": 36, "tty": False,
                "keep_all": True, "env": dict(os.environ, GREETING="the zygote"),
                "argv": ["process_entry.py"], "data_file": data, "task_id": task,
                "init_file": ""}
        fd = 1 if mode == "lines" else os.open(sys.argv[1] + "/log", os.O_WRONLY | os.O_CREAT)
        sys.stdout.flush()
        pids.append(zygote.fork_node(spec, [fd]))
    import time
    deadline = time.time() + 30
    while len(zygote.collect_exits()) < 2 and time.time() < deadline:
        time.sleep(0.05)
    zygote.close()
    print("exits", json.dumps([zygote.exits.get(p) for p in pids]))
    """
)


@pytest.mark.timeout(120)
def test_the_zygote_forks_nodes_that_run_their_function_and_reports_their_exit_codes(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _NODES, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    hello = [line for line in lines if "hello from the zygote" in line]
    assert len(hello) == 1 and hello[0].startswith("[node/0] hello"), out.stdout
    assert hello[0].endswith("threads 1")  # a forked node starts with one thread
    assert lines[-1] == "exits [0, 3]", out.stdout


def test_thread_count_counts_this_process_threads():
    # In a process of its own: in a test worker, threads that earlier tests left
    # (gRPC's, TensorFlow's) start and end at any time (a loaded run saw 97 == 97 + 1).
    # The count is the OS's (/proc/self/task): the started threads are in it at
    # once, and the joined ones leave it shortly after.
    script = textwrap.dedent(
        """
        import threading, time
        from launch.zygote import thread_count
        before = thread_count()
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(3)]
        for t in threads:
            t.start()
        during = thread_count()
        stop.set()
        for t in threads:
            t.join()
        # A joined thread's OS thread may linger in /proc a moment: poll.
        deadline = time.monotonic() + 30
        while thread_count() != before and time.monotonic() < deadline:
            time.sleep(0.01)
        print(before, during, thread_count())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    before, during, after = map(int, out.stdout.split())
    assert (during, after) == (before + 3, before), out.stdout
