r"""Start-up benchmark: forked nodes (--node_start=fork) against spawned ones
(--node_start=spawn), side by side in one run, alternating.

    .venv/bin/python bench/startup.py [--repeats 5]

Each repeat runs the default CartPole config once per mode until the learner's
50th step, plus one fresh `python -c "import tensorflow, reverb, launchpad"`,
and measures:
  - launch -> first SGD step: summary.json first_learner_step_seconds (counted
    from the entry point's start);
  - launch -> first line: the first timed `[apex  N.Ns]` line the launcher prints
    (start lines or progress), from the process start, read from its stdout;
  - CPU s to the first SGD step: user+system seconds of the program's process
    tree (sampled every 0.1 s; a process that exits counts with its last
    sample) from launch to the first SGD step, and the whole machine's
    (/proc/stat busy jiffies; includes anything else running);
  - import s: the wall time of one fresh import of the stack.
Prints medians and writes bench/results/startup-<commit>.json. Run nothing
else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil
from common import ROOT, save_results

_TIMED_LINE = re.compile(r"^\[apex\s+[\d.]+s\]")
_TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / _TICK


def import_seconds() -> float:
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-c", "import tensorflow, reverb, launchpad"],
        cwd=ROOT,
        check=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SETUPTOOLS_USE_DISTUTILS="stdlib"),
    )
    return time.time() - t0


def run_once(mode: str, timeout: float) -> dict:
    run_dir = tempfile.mkdtemp(prefix="apex-startup-")
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        "--config=configs/apex_cartpole.py",
        f"--config.run_dir={run_dir}",
        f"--node_start={mode}",
        "--config.stop.max_learner_steps=50",
        "--config.stop.max_wall_seconds=None",
    ]
    samples: list[tuple[float, float, float]] = []  # (time, tree cpu, machine busy)
    seen: dict[int, float] = {}
    first_line: list[float] = []
    busy0 = machine_busy_seconds()
    t0 = time.time()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        t = p.cpu_times()
                        seen[p.pid] = t.user + t.system
                    except psutil.Error:
                        continue
            except psutil.Error:
                pass
            samples.append((time.time() - t0, sum(seen.values()), machine_busy_seconds() - busy0))
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if not first_line and _TIMED_LINE.match(line):
            first_line.append(time.time() - t0)
    proc.wait(timeout)
    done.set()
    sampler.join()
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    first_step = summary.get("first_learner_step_seconds")
    at = [s for s in samples if first_step is not None and s[0] <= first_step]
    tree_cpu, machine_cpu = (at[-1][1], at[-1][2]) if at else (None, None)
    if proc.returncode != 0:
        print("".join(lines[-30:]), file=sys.stderr)
    return {
        "mode": mode,
        "returncode": proc.returncode,
        "first_learner_step_seconds": first_step,
        "first_line_seconds": first_line[0] if first_line else None,
        "tree_cpu_seconds_to_first_step": tree_cpu,
        "machine_cpu_seconds_to_first_step": machine_cpu,
        "process_seconds": time.time() - t0,
    }


def median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    rows: list[dict] = []
    imports: list[float] = []
    for i in range(args.repeats):
        order = ("fork", "spawn") if i % 2 == 0 else ("spawn", "fork")
        for mode in order:
            row = run_once(mode, args.timeout)
            rows.append(row)
            print(json.dumps(row), flush=True)
        imports.append(import_seconds())
        print(f"import tensorflow, reverb, launchpad: {imports[-1]:.2f} s", flush=True)
    table = {}
    for mode in ("fork", "spawn"):
        mine = [r for r in rows if r["mode"] == mode]
        table[mode] = {
            key: median(mine, key)
            for key in (
                "first_learner_step_seconds",
                "first_line_seconds",
                "tree_cpu_seconds_to_first_step",
                "machine_cpu_seconds_to_first_step",
            )
        }
    imp = statistics.median(imports)
    print(f"\nmedians of {args.repeats} (this machine; one fresh import of the stack: {imp:.2f} s)")
    print(f"{'':34} {'fork':>8} {'spawn':>8}")
    names = {
        "first_learner_step_seconds": "launch -> first SGD step, s",
        "first_line_seconds": "launch -> first timed line, s",
        "tree_cpu_seconds_to_first_step": "CPU s to first step (tree)",
        "machine_cpu_seconds_to_first_step": "CPU s to first step (machine)",
    }
    for key, name in names.items():
        f, s = table["fork"][key], table["spawn"][key]
        print(f"{name:34} {f if f is None else f'{f:8.2f}'} {s if s is None else f'{s:8.2f}'}")
    path = save_results(
        "startup",
        {"repeats": args.repeats, "rows": rows, "imports": imports, "medians": table},
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
