r"""What the dependency set costs: install size, node start-up and per-node RSS.

    .venv/bin/python bench/footprint.py [--python=/other/venv/bin/python ...] [--repeats 5]

For each Python (default: this one) prints the size of its site-packages, the
median time to import what every node process imports (tensorflow, reverb,
launchpad, apex's node adapters) and the RSS after that import, whether jax got
imported with it, and (with --run) the peak RSS of every node of a short real
run, from the run's heartbeats. Several --python values are measured side by
side, alternating repeats, so that the machine's noise hits each alike. Writes
bench/results/footprint-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from common import ROOT, header, save_results

# What a node process imports before it does any work.
_PROBE = r"""
import json, sys, time
t0 = time.time()
import tensorflow, reverb, launchpad  # noqa
import launch.nodes  # noqa: apex's node adapters
seconds = time.time() - t0
mem = {}
for line in open("/proc/self/status"):
    name, _, value = line.partition(":")
    if name in ("VmRSS", "RssAnon", "RssFile"):
        mem[name] = int(value.split()[0]) / 1024.0
print(json.dumps({"import_seconds": seconds, "rss_mb": mem["VmRSS"], "anon_mb": mem["RssAnon"],
                  "file_mb": mem["RssFile"], "jax_imported": "jax" in sys.modules}))
"""


def site_packages_mb(python: str) -> float:
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    total = 0
    for root, _, files in os.walk(out):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total / 2**20


def drop_page_cache() -> bool:
    """Empties the page cache (needs root): otherwise a venv whose files were just
    written shows more shared pages mapped than one read piecemeal over time."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def probe(python: str) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [python, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, env=env, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_rss(python: str, seconds: float) -> dict[str, float]:
    """RSS and private (anonymous) RSS, MiB, per node at the end of a short default
    run, from its heartbeats."""
    run_dir = tempfile.mkdtemp(prefix="apex-footprint-")
    subprocess.run(
        [
            python,
            "-m",
            "launch.train",
            "--config=configs/apex_cartpole.py",
            f"--config.run_dir={run_dir}",
            f"--config.stop.max_wall_seconds={seconds}",
            "--config.stop.max_actor_steps=None",
            "--config.checkpoint.on_stop=false",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=seconds + 180,
        check=False,
    )
    out = {}
    beats = os.path.join(run_dir, "heartbeats")
    for name in sorted(os.listdir(beats)) if os.path.isdir(beats) else []:
        with open(os.path.join(beats, name)) as f:
            beat = json.load(f)
        out[beat["node"]] = {k: beat.get(k) for k in ("rss_mb", "anon_rss_mb", "peak_rss_mb")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--python", action="append", default=[], help="a venv's python")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--run", type=float, default=0.0, help="also a run of this many s")
    args = parser.parse_args()
    pythons = args.python or [sys.executable]

    print(header("bench/footprint.py"), flush=True)
    probes: dict[str, list[dict]] = {p: [] for p in pythons}
    dropped = False
    for _ in range(args.repeats):
        for p in pythons:  # alternating: noise hits each alike
            dropped = drop_page_cache()
            probes[p].append(probe(p))
    results = {}
    for p in pythons:
        rows = probes[p]
        results[p] = {
            "site_packages_mb": site_packages_mb(p),
            "import_seconds_median": statistics.median(r["import_seconds"] for r in rows),
            "import_rss_mb_median": statistics.median(r["rss_mb"] for r in rows),
            "import_anon_mb_median": statistics.median(r["anon_mb"] for r in rows),
            "import_file_mb_median": statistics.median(r["file_mb"] for r in rows),
            "jax_imported": any(r["jax_imported"] for r in rows),
        }
        if args.run:
            drop_page_cache()
            results[p]["run_rss_mb"] = run_rss(p, args.run)
    print(
        f"{'python':<40} {'site-pkgs MiB':>13} {'import s':>9} {'RSS MiB':>8} "
        f"{'private':>8} {'shared':>7} jax"
    )
    for p, r in results.items():
        print(
            f"{p:<40} {r['site_packages_mb']:>13,.0f} {r['import_seconds_median']:>9.2f} "
            f"{r['import_rss_mb_median']:>8.0f} {r['import_anon_mb_median']:>8.0f} "
            f"{r['import_file_mb_median']:>7.0f} {r['jax_imported']}"
        )
        for node, mem in r.get("run_rss_mb", {}).items():
            print(
                f"    {node:<20} RSS {mem['rss_mb'] or 0:,.0f} MiB, private "
                f"{mem['anon_rss_mb'] or 0:,.0f} MiB, peak {mem['peak_rss_mb'] or 0:,.0f} MiB"
            )
    print(f"page cache dropped before each measurement: {dropped} (needs root)")
    print(
        "private: anonymous pages, this process's own; shared: library and file pages, "
        "mapped once per host whatever the number of node processes"
    )
    print(
        "saved",
        save_results(
            "footprint",
            {"repeats": args.repeats, "page_cache_dropped": dropped, "results": results},
        ),
    )


if __name__ == "__main__":
    main()
