r"""Runs an experiment: one config over seeds and a grid of settings.

    python -m launch.experiment --config=configs/apex_cartpole.py --seeds=5 \
        --set learner.batch_size=64,256 --set replay.samples_per_insert=4,8 \
        --out=experiments/bs-spi [--parallel=K] [--launcher=ray] [--retry-failed] \
        [--dry-run] [-- EXTRA launch.train FLAGS]

Every `--set FIELD=V1,V2,...` is a grid axis (FIELD dotted as in
`--config.FIELD=V`; commas inside brackets or quotes stay: `--set
learner.hidden_sizes="(64, 64),(256, 256)"`); a `--set` with one value is a
fixed override of every trial. The grid's product times the seeds are the
trials; seed S sets `seed` and `learner.seed`. Every setting is loaded,
overridden and validated (the env made once) before anything runs; a bad field
or value is refused naming it (exit 2).

Each trial is a `python -m launch.train` of its own run directory,
DIR/trials/<setting>/seed-<S>, output in DIR/logs/<setting>/seed-<S>.log;
DIR/experiment.json records the config, grid, seeds, commit and every trial's
state and attempts. With logging.wandb or logging.mlflow on, the trials are one
W&B group, and MLflow runs nested under one parent run (DIR/mlruns by default).

One trial at a time by default; --parallel=K runs K at once. --launcher=ray
makes every trial a program on the Ray cluster (--ray_address, or
--ray_simulate_nodes=N: one simulated cluster on this machine for the whole
experiment); a trial the cluster has no room for waits until a running one ends.

Ctrl-C (or SIGTERM) is forwarded to the running trials' process groups: each
stops in order and is recorded `stopped`; the experiment exits 130 (143). The
same command again resumes the stopped trials, starts the pending ones and
skips the finished ones; a failed trial is recorded with its cause and the
others go on; --retry-failed reruns the failed ones. The same --out with another
--config, --set or --seeds is refused. Exit codes: 0 every trial finished, 1
some trial failed, 2 bad input, 130/143 stopped by a signal.

Report: `python -m tools.experiment report DIR`.
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import apex
from apex import ConfigError, apply_override, checkpointing, git_commit, load_config_file, validate
from launch.experiment_record import (  # noqa: F401 - failure_cause, trial_results: public here too
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    STOPPED,
    check_no_live_trials,
    check_same,
    counts,
    failure_cause,
    load_record,
    new_record,
    parse_seeds,
    parse_sets,
    read_summary,
    save_record,
    setting_label,
    settings,
    to_run,
    trial_overrides,
    trial_results,
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# launch.train's refusal of a program the Ray cluster cannot hold (now).
NO_ROOM = "does not fit the Ray cluster"


def _shown(path: str) -> str:
    """`path` relative to the working directory when under it, else absolute."""
    rel = os.path.relpath(path, os.getcwd())
    return path if rel.startswith("..") else rel


def validate_grid(config_path: str, grid: dict[str, list[str]], seeds: list[int]) -> list:
    """Loads, overrides and validates every setting as launch.train would before a
    launch (its env made once); raises ConfigError naming the field, the value
    and the setting. Returns the settings' configs."""
    from apex import prepare_env
    from apex.agents import check_torso

    base = load_config_file(config_path)
    configs = []
    for setting in settings(grid):
        label = setting_label(setting, grid)
        config = copy.deepcopy(base)
        try:
            for field, text in setting.items():
                apply_override(config, field, text)
            for field, text in (("seed", str(seeds[0])), ("learner.seed", str(seeds[0]))):
                apply_override(config, field, text)
            validate(config)
            prepared = prepare_env(config)
            check_torso(config, prepared.spec)
        except ConfigError as err:
            where = f" (setting '{label}')" if label != "base" else ""
            raise ConfigError(err.field, err.value, f"{err.valid}{where}") from None
        configs.append(config)
    return configs


def simulated_cluster(configs: list, nodes: int, parallel: int):
    """One simulated Ray cluster of `nodes` nodes on this machine for the whole
    experiment (launch.ray_connect.SimulatedCluster), sized for `parallel`
    programs of its largest setting, as launch.train sizes one for one program."""
    import math

    from apex import SERVER_LABELS
    from launch.ray_connect import SimulatedCluster
    from launch.ray_plan import program_demands

    if nodes < 2:
        raise ConfigError("--ray_simulate_nodes", nodes, "an integer >= 2 (a head and workers)")
    servers = actors = 0.0
    for config in configs:
        wanted = program_demands(config)
        servers = max(
            servers, sum(d.cpus for d in wanted if d.label in SERVER_LABELS and not d.is_shard)
        )
        actors = max(actors, sum(d.cpus for d in wanted if d.label == "actor" or d.is_shard))
    return SimulatedCluster(
        nodes,
        max(math.ceil(parallel * servers), 1),
        max(math.ceil(parallel * actors / (nodes - 1)), 1),
    )


class TrialProcess:
    """One trial's launch.train, in a process group of its own (a terminal's
    Ctrl-C reaches the experiment only; it forwards the signal)."""

    def __init__(self, trial: dict[str, Any], argv: list[str], log_path: str):
        del trial
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            log.write(f"\n[experiment] {' '.join(argv)}\n".encode())
            log.flush()
            self.offset = log.tell()
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def output(self) -> str:
        """What this attempt wrote."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""


class Runner:
    """Runs an experiment's trials to their end (or a stop) and keeps its record.

    `start(trial, argv, log_path)` returns a handle with poll(), signal(sig) and
    output() (TrialProcess; tests pass a fake). `on_end(trial, run_dir, summary)`
    is called after every trial that ended (the HParams writer)."""

    def __init__(
        self,
        out: str,
        record: dict[str, Any],
        train_args: list[str],
        *,
        parallel: int = 1,
        retry_failed: bool = False,
        start: Callable[..., Any] = TrialProcess,
        on_end: Callable[[dict, str, dict | None], None] | None = None,
        say: Callable[[str], None] = print,
        poll_seconds: float = 0.2,
        python: str = sys.executable,
        trial_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        config: str | None = None,
    ):
        self.out = os.path.abspath(out)
        self.record = record
        self.train_args = train_args
        self.parallel = parallel
        self.retry_failed = retry_failed
        self.start = start
        self.on_end = on_end
        self.say = say
        self.poll_seconds = poll_seconds
        self.python = python
        self.trial_timeout = trial_timeout
        # The config file as this invocation found it (a rerun may start elsewhere).
        self.config = config or record["config"]
        self.clock = clock
        self.deadlines: dict[str, tuple[float, int]] = {}  # id -> (when, signals sent)
        self.signals: list[int] = []  # stops acted on
        self.received: list[int] = []  # noted by the handler, not yet acted on
        self.running: dict[str, tuple[dict, Any]] = {}

    # -- signals ---------------------------------------------------------------
    def notify(self, sig: int) -> None:
        """The signal handler's part: note `sig` (nothing else is safe in a
        handler); the run loop acts on it within one poll."""
        self.received.append(sig)

    def _take_signals(self) -> None:
        while self.received:
            self.request_stop(self.received.pop(0))

    def request_stop(self, sig: int = signal.SIGINT) -> None:
        """Forwards `sig` to every running trial (first time); the third request
        kills them (SIGKILL)."""
        self.signals.append(sig)
        if len(self.signals) == 1:
            self.say(
                f"[experiment] {signal.Signals(sig).name}: stopping {len(self.running)} running "
                "trial(s) in order (final checkpoints); run the same command again to resume"
            )
            for _, handle in self.running.values():
                handle.signal(sig)
        elif len(self.signals) == 2:
            self.say(
                "[experiment] the stop goes on (final checkpoints being written); "
                "once more kills the trials"
            )
        else:
            self.say("[experiment] killing the running trials (SIGKILL)")
            for _, handle in self.running.values():
                handle.signal(signal.SIGKILL)

    # -- trials ----------------------------------------------------------------
    def argv(self, trial: dict[str, Any], resume: bool) -> list[str]:
        args = [
            self.python,
            "-m",
            "launch.train",
            f"--config={self.config}",
            *(f"--config.{k}={v}" for k, v in trial_overrides(trial, self.out)),
            *self.train_args,
        ]
        return args + (["--resume"] if resume else [])

    def _begin(self, trial: dict[str, Any]) -> None:
        run_dir = os.path.join(self.out, trial["run_dir"])
        resume = (
            checkpointing.latest_complete(run_dir) is not None if os.path.isdir(run_dir) else False
        )
        attempt: dict[str, Any] = {"started": time.time(), "resume": resume}
        if not resume and os.path.exists(os.path.join(run_dir, "config.json")):
            # A run with no complete checkpoint (stopped or failed before its first):
            # launch.train refuses to overwrite it; it is kept aside and the trial starts afresh.
            aside = f"{run_dir}.attempt-{len(trial['attempts'])}"
            os.rename(run_dir, aside)
            attempt["moved_aside"] = os.path.relpath(aside, self.out)
        log = os.path.join(self.out, "logs", trial["id"] + ".log")
        handle = self.start(trial, self.argv(trial, resume), log)
        attempt["pid"] = getattr(handle, "pid", None)
        trial["attempts"].append(attempt)
        trial.update(state=RUNNING, cause=None, returncode=None)
        self.running[trial["id"]] = (trial, handle)
        if self.trial_timeout is not None:
            self.deadlines[trial["id"]] = (self.clock() + self.trial_timeout, 0)
        save_record(self.out, self.record)
        self.say(
            f"[experiment] {'resuming' if resume else 'starting'} {trial['id']} "
            f"({self._progress()}) log: {_shown(log)}"
        )

    def _end(self, trial: dict[str, Any], handle: Any, rc: int) -> bool:
        """Records a trial's end; False when it goes back to pending (no room on Ray)."""
        del self.running[trial["id"]]
        timed_out = self.deadlines.pop(trial["id"], (0.0, 0))[1] > 0
        run_dir = os.path.join(self.out, trial["run_dir"])
        attempt = trial["attempts"][-1]
        summary = read_summary(run_dir, since=attempt["started"])
        attempt.update(
            ended=time.time(),
            returncode=rc,
            clock_start_time=(summary or {}).get("clock_start_time"),
            stop_reason=(summary or {}).get("stop_reason"),
        )
        trial["returncode"] = rc
        output = handle.output()
        if rc == EXIT_BAD_INPUT and NO_ROOM in output and self.running:
            trial["attempts"].pop()
            trial.update(state=PENDING, cause=None)
            save_record(self.out, self.record)
            self.say(f"[experiment] {trial['id']}: no room on the cluster now; it waits")
            return False
        if rc == 0:
            trial.update(state=FINISHED, cause=None)
        elif rc in EXIT_SIGNAL.values():
            sig = "SIGINT" if rc == 130 else "SIGTERM"
            trial.update(state=STOPPED, cause=f"stopped by {sig}")
        elif self.signals:
            # Any other end after the experiment forwarded a stop, e.g. a trial still
            # importing when Ctrl-C came (-2: Python's default SIGINT): resumable.
            sig = signal.Signals(self.signals[0]).name
            trial.update(state=STOPPED, cause=f"stopped by {sig} (exit {rc})")
        else:
            trial.update(state=FAILED, cause=failure_cause(rc, output, summary))
        if timed_out and not self.signals:
            trial.update(
                state=FAILED, cause=f"timed out after {self.trial_timeout:g} s (--trial_timeout)"
            )
        save_record(self.out, self.record)
        if self.on_end is not None and trial["state"] != STOPPED:
            try:
                self.on_end(trial, run_dir, summary)
            except Exception as err:  # noqa: BLE001 - a dashboard must not stop the experiment
                self.say(f"[experiment] note: {trial['id']}: HParams not written ({err})")
        s = summary or {}
        figures = (
            f"eval {s.get('eval_return_mean')}, best {s.get('best_eval_return_mean')}, "
            f"solved at {s.get('solved_at_env_steps')} env steps, {s.get('stop_reason')}"
        )
        self.say(
            f"[experiment] {trial['id']}: {trial['state']}"
            + (f" ({trial['cause']})" if trial["state"] == FAILED else f": {figures}")
            + f" [{self._progress()}]"
        )
        return True

    def _enforce_timeouts(self) -> None:
        """A trial past --trial_timeout gets SIGTERM (its orderly stop), and SIGKILL
        a stop window (60 s) later."""
        now = self.clock()
        for tid, (when, sent) in list(self.deadlines.items()):
            if now < when or tid not in self.running:
                continue
            handle = self.running[tid][1]
            if sent == 0:
                self.say(f"[experiment] {tid}: past --trial_timeout; stopping it (SIGTERM)")
                handle.signal(signal.SIGTERM)
                self.deadlines[tid] = (now + 60.0, 1)
            elif sent == 1:
                handle.signal(signal.SIGKILL)
                self.deadlines[tid] = (float("inf"), 2)

    def _progress(self) -> str:
        c = counts(self.record)
        return ", ".join(f"{n} {state}" for state, n in c.items() if n)

    def run(self) -> int:
        queue = to_run(self.record, self.retry_failed)
        cap = self.parallel
        self.say(
            f"[experiment] {self.out}: {len(self.record['trials'])} trials; this run starts "
            f"{len(queue)} ({self._progress()}), {self.parallel} at a time"
        )
        while True:
            self._take_signals()
            if not (self.running or (queue and not self.signals)):
                break
            while queue and not self.signals and len(self.running) < cap:
                self._begin(queue.pop(0))
            self._enforce_timeouts()
            for trial, handle in list(self.running.values()):
                rc = handle.poll()
                if rc is not None and not self._end(trial, handle, rc):
                    queue.insert(0, trial)
                    cap = max(1, len(self.running))
            if self.running:
                time.sleep(self.poll_seconds)
        self.say(
            f"[experiment] {self._progress()}; report: python -m tools.experiment report "
            f"{_shown(self.out)}"
        )
        if self.signals:
            return EXIT_SIGNAL[self.signals[0]]
        return EXIT_FAILED if counts(self.record)[FAILED] else EXIT_OK


def _hparams_writer(out: str, record: dict[str, Any]):
    from launch import experiment_tb

    def on_end(trial: dict, run_dir: str, summary: dict | None) -> None:
        if summary is not None:
            experiment_tb.write_trial(run_dir, trial, summary)

    experiment_tb.write_config(out, record["grid"])
    return on_end


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The experiment's flags, and the launch.train flags after `--`."""
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m launch.experiment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="a config file (get_config())")
    parser.add_argument("--seeds", default="5", help="N (seeds 0..N-1) or a list 0,3,7")
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=V1,V2", help="a grid axis"
    )
    parser.add_argument("--out", required=True, help="the experiment's folder")
    parser.add_argument("--parallel", type=int, default=1, help="trials at once")
    parser.add_argument("--launcher", choices=("local", "ray"), default="local")
    parser.add_argument("--ray_address", default=None, help="with --launcher=ray")
    parser.add_argument(
        "--ray_simulate_nodes",
        type=int,
        default=0,
        help="with --launcher=ray: one simulated Ray cluster of N nodes on this machine for "
        "every trial, sized for --parallel programs",
    )
    parser.add_argument(
        "--retry-failed", "--retry_failed", dest="retry_failed", action="store_true"
    )
    parser.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true")
    parser.add_argument(
        "--trial_timeout",
        type=float,
        default=None,
        help="seconds after which a trial is stopped (SIGTERM, then SIGKILL) and failed",
    )
    parser.add_argument(
        "--no-hparams", "--no_hparams", dest="hparams", action="store_false",
        help="do not write TensorBoard HParams",
    )  # fmt: skip
    args = parser.parse_args(argv)
    for arg in extra:
        if arg.startswith(("--config", "--resume", "--noresume")):
            raise ConfigError(
                "launch.train flag",
                arg,
                "a flag other than --config*, --resume (use --config and --set; the "
                "experiment resumes trials itself)",
            )
    if args.parallel < 1:
        raise ConfigError("--parallel", args.parallel, "an integer >= 1")
    for name in ("ray_address", "ray_simulate_nodes"):
        if getattr(args, name) and args.launcher != "ray":
            raise ConfigError(f"--{name}", getattr(args, name), "given only with --launcher=ray")
    if args.ray_address and args.ray_simulate_nodes:
        raise ConfigError(
            "--ray_address", args.ray_address, "no --ray_address with --ray_simulate_nodes"
        )
    train_args = list(extra)
    if args.launcher == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ConfigError(
                "--launcher", "ray", "local, or ray with Ray installed (pip install -e '.[ray]')"
            )
        if not args.ray_simulate_nodes:
            train_args = ["--launcher=ray", *train_args]
        if args.ray_address:
            train_args.append(f"--ray_address={args.ray_address}")
    return args, train_args


def run_experiment(
    config: str,
    out: str,
    *,
    seeds: list[int],
    sets: list[str] = (),
    train_args: list[str] = (),
    parallel: int = 1,
    retry_failed: bool = False,
    hparams: bool = True,
    trial_timeout: float | None = None,
    dry_run: bool = False,
    ray_simulate_nodes: int = 0,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> tuple[int, dict[str, Any]]:
    """Validates the grid, then runs (or resumes) the experiment in `out`; returns
    (exit code, the record). bench/ calls this; `main` is its command line.
    Raises ConfigError before anything runs on a bad grid, or a grid other
    than the one `out` holds."""
    grid = parse_sets(list(sets))
    record = load_record(out)
    if record is not None:
        check_same(record, config, grid, seeds, out)
    configs = validate_grid(config, grid, seeds)
    n = len(configs)
    if record is not None:
        check_no_live_trials(record)
    if record is None:
        record = new_record(config, grid, seeds, commit=git_commit(ROOT), argv=sys.argv)
    say(
        f"[experiment] {config}: {n} setting(s) x {len(seeds)} seed(s) = "
        f"{len(record['trials'])} trials, validated"
    )
    if dry_run:
        for t in record["trials"]:
            say(f"  {t['id']}: {t['state']}")
        return EXIT_OK, record
    os.makedirs(out, exist_ok=True)
    lock = open(os.path.join(out, ".lock"), "w")  # noqa: SIM115 - held for the whole run
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise ConfigError(
            "--out", out, "a folder no other launch.experiment is running in"
        ) from None
    cluster = None
    if ray_simulate_nodes:
        cluster = simulated_cluster(configs, ray_simulate_nodes, parallel)
        train_args = ["--launcher=ray", f"--ray_address={cluster.address}", *train_args]
        say(
            f"[experiment] a simulated Ray cluster of {ray_simulate_nodes} nodes at {cluster.address}"
        )
    grouping = apex.group_overrides(configs[0], out, record.setdefault("tracking", {}), train_args)
    train_args = [*train_args, *(f"--config.{k}={v}" for k, v in grouping.items())]
    record["runs"].append({"started": time.time(), "commit": git_commit(ROOT), "argv": sys.argv})
    save_record(out, record)
    runner = Runner(
        out,
        record,
        list(train_args),
        parallel=parallel,
        retry_failed=retry_failed,
        on_end=_hparams_writer(out, record) if hparams else None,
        say=say,
        trial_timeout=trial_timeout,
        config=os.path.abspath(config),
    )
    previous = {sig: signal.signal(sig, lambda s, f: runner.notify(s)) for sig in EXIT_SIGNAL}
    try:
        code = runner.run()
        apex.end_group(grouping, code)
        return code, record
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        record["runs"][-1]["ended"] = time.time()
        save_record(out, record)
        if cluster is not None:
            cluster.shutdown()
        lock.close()


def main(argv: list[str]) -> int:
    args, train_args = parse_args(argv)
    code, _ = run_experiment(
        args.config,
        os.path.abspath(args.out),
        seeds=parse_seeds(args.seeds),
        sets=args.set,
        train_args=train_args,
        parallel=args.parallel,
        retry_failed=args.retry_failed,
        hparams=args.hparams,
        trial_timeout=args.trial_timeout,
        dry_run=args.dry_run,
        ray_simulate_nodes=args.ray_simulate_nodes,
    )
    return code


def run() -> None:
    try:
        code = main(sys.argv[1:])
    except ConfigError as err:
        print(f"apex: invalid experiment: {err}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    sys.exit(code)


if __name__ == "__main__":
    run()
