r"""Trains an apex program: `python -m launch.train --config=configs/apex_cartpole.py`.

Overrides: any config field as `--config.<section>.<field>=<value>`, e.g.
`--config.actor.num_actors=4 --config.stop.max_wall_seconds=60`.
Launch: `--lp_launch_type=local_mp` (default; one process per node),
`local_mt` (threads in one process) or `test_mt`.
Output: the run directory (config.run_dir, default runs/<time>-<config>) holds
config.json, versions.json, metrics/*.jsonl, checkpoints/ and summary.json.
Resume: `--config.run_dir=EXISTING` (or `--resume`) continues from the newest
complete checkpoint in it.
"""

from __future__ import annotations

import os

# Entry-point only: quiet TensorFlow's C++ start-up logs before anything
# imports it (inherited by every node process). Errors still print.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
# Reverb imports distutils at start-up (reverb.platform.default.ensure_tf_install);
# setuptools' replacement of it costs 0.35 s of CPU per process here, Python
# 3.10's own 1 ms. Every node process inherits this.
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")

import importlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

from absl import app, flags, logging  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)


# Launchpad's flags (--lp_launch_type, ...) without its package's imports
# (apex.compat says how): most of the suite's launch.train processes only
# refuse a bad flag or config, and need none of TensorFlow, Reverb or Courier.
from apex import compat  # noqa: E402

compat.define_launchpad_flags()


from apex import checkpointing  # noqa: E402
from apex import config as apex_config  # noqa: E402
from apex.errors import ConfigError  # noqa: E402
from apex.jsonio import write_json_atomic  # noqa: E402
from apex.supervision import NodeMonitor  # noqa: E402

_CONFIG = flags.DEFINE_string("config", None, "Path of a config file with get_config().")
_TERMINAL = flags.DEFINE_enum(
    "terminal",
    "current_terminal",
    ["current_terminal", "output_to_files"],
    "Where local_mp node output goes (output_to_files: one file per node in RUN_DIR/logs).",
)

_RESUME = flags.DEFINE_bool(
    "resume",
    False,
    "Require a resume: --config.run_dir must hold a complete checkpoint. (A run_dir "
    "holding one is resumed without this flag too.)",
)

_ISOLATE = flags.DEFINE_bool(
    "isolate_network",
    False,
    "Run the program in a private network namespace (unshare -rn): only loopback, no port "
    "reachable from the host or the network. tools.replay/status --run_dir then read "
    "checkpoints and heartbeats only (the live server is not reachable from outside).",
)

_VERBOSE = flags.DEFINE_bool(
    "verbose",
    False,
    "Keep every line of library output (Reverb, Launchpad, absl INFO) that apex filters as noise.",
)

_LAUNCHER = flags.DEFINE_enum(
    "launcher",
    "local",
    ["local", "ray"],
    "local: this machine, as --lp_launch_type says (local_mp by default). ray: the same "
    "program placed across a Ray cluster (--ray_address; config.cluster says what each node "
    "takes); README 'Running on a cluster'.",
)
_RAY_ADDRESS = flags.DEFINE_string(
    "ray_address",
    "auto",
    "With --launcher=ray: 'auto' (the cluster `ray start` started on this host) or "
    "HOST:PORT of the head node.",
)
_RAY_SIMULATE = flags.DEFINE_integer(
    "ray_simulate_nodes",
    0,
    "With --launcher=ray: start a Ray cluster of this many nodes on this machine for the run "
    "(Ray's own multi-node simulation; a head with 'apex_learner', workers with "
    "'apex_actor') and shut it down afterwards. 0: use --ray_address.",
)

_OVERRIDES: list[tuple[str, str]] = []
_LAUNCH_TIME = time.time()

# The launch types apex runs (Launchpad lists more: local_docker is unimplemented
# in 0.5.0, vertex_ai needs Google Cloud, test_mp needs a test case).
SUPPORTED_LAUNCH_TYPES = ("local_mp", "local_mt")

# Exit codes (README "Exit codes").
EXIT_OK = 0  # the run reached its own stop criterion
EXIT_NODE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
_SIGNALS_SEEN: list[int] = []


def _record_signals() -> None:
    """Notes SIGINT/SIGTERM sent to the launcher (for its exit code), then lets
    Launchpad's own handlers do the orderly stop."""
    for sig in EXIT_SIGNAL:
        previous = signal.getsignal(sig)

        def handler(signum, frame, previous=previous):
            _SIGNALS_SEEN.append(signum)
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                raise KeyboardInterrupt

        signal.signal(sig, handler)


def exit_code(summary: dict | None, failed: bool) -> int:
    """0 for a run that stopped on its own criterion, 1 for a failed node, 130/143
    for a run stopped by SIGINT/SIGTERM."""
    if failed or (summary or {}).get("stop_reason") == "node failed":
        return EXIT_NODE_FAILED
    reason = (summary or {}).get("stop_reason")
    if reason in (None, "stopped"):
        for sig in (signal.SIGINT, signal.SIGTERM):
            if sig in _SIGNALS_SEEN:
                return EXIT_SIGNAL[sig]
    return EXIT_OK


def parse_argv(argv: list[str]) -> list[str]:
    """Splits `--config.a.b=v` overrides off argv (kept in _OVERRIDES); absl parses the rest."""
    rest = []
    for arg in argv:
        if arg.startswith("--config."):
            path, sep, value = arg[len("--config.") :].partition("=")
            if not sep:
                raise ConfigError(
                    f"config.{path}", arg, "the form --config.<section>.<field>=<value>"
                )
            _OVERRIDES.append((path, value))
        else:
            rest.append(arg)
    return rest


def load_and_prepare(path: str, overrides: list[tuple[str, str]]):
    """Loads, overrides and validates a config, then makes one env (apex.envs.prepare_env:
    env.imports, env.kwargs, the observation encoding, target_return='auto') and checks
    that the torso fits it: everything a launch would refuse, refused before it.
    Returns (config, PreparedEnv)."""
    config = apex_config.load_config_file(path)
    for field, value in overrides:
        apex_config.apply_override(config, field, value)
    apex_config.validate(config)
    # Only now: a config refused above does not pay Gymnasium's import.
    from apex.agents.layers import check_torso
    from apex.envs import prepare_env

    prepared = prepare_env(config)
    check_torso(config, prepared.spec)
    return config, prepared


def load_config(path: str, overrides: list[tuple[str, str]]) -> apex_config.ApexConfig:
    """The config `load_and_prepare` returns, checked as before a launch."""
    return load_and_prepare(path, overrides)[0]


def resume_checkpoint(
    config: apex_config.ApexConfig, run_dir: str, require: bool
) -> checkpointing.Checkpoint | None:
    """The checkpoint a launch into `run_dir` continues from (None: a fresh run).

    Raises ConfigError when there is nothing to resume but a run is there (or a
    resume was required), and CheckpointError when the newest complete
    checkpoint is corrupt or does not fit `config`.
    """
    has_run = os.path.isfile(os.path.join(run_dir, "config.json"))
    latest = checkpointing.latest_complete(run_dir) if os.path.isdir(run_dir) else None
    if latest is None:
        if require or has_run:
            folder = checkpointing.checkpoints_dir(run_dir)
            names = os.listdir(folder) if os.path.isdir(folder) else []
            partial = sorted(n for n in names if n.endswith(".partial"))
            why = "it holds no run" if not has_run else "it holds a run with no complete checkpoint"
            if partial:
                why += f" (only half-written ones, ignored: {', '.join(sorted(partial))})"
            raise ConfigError(
                "run_dir",
                run_dir,
                f"a new directory, or a run directory with a complete checkpoint to resume; {why}",
            )
        return None
    try:
        checkpoint = checkpointing.load(latest)
    except checkpointing.CheckpointError as err:
        older = checkpointing.list_complete(run_dir)[:-1]
        hint = (
            f"; move it away to resume from {os.path.basename(older[-1])}"
            if older
            else "; no older complete checkpoint is left"
        )
        raise checkpointing.CheckpointError(f"{err}{hint}") from None
    from apex.agents.policy import make_network
    from apex.envs import env_spec
    from apex.replay.tables import item_signature

    spec = env_spec(config.env)
    shapes = [list(w.shape) for w in make_network(config, spec, seed=0).weights]
    current = checkpointing.make_manifest(config, item_signature(config, spec), shapes)
    checkpointing.check_compatible(checkpoint, current)
    return checkpoint


def _finalize_summary(run_dir: str, reason: str, failure: str | None = None) -> dict | None:
    """Writes summary.json from the coordinator's last state if the coordinator could
    not; records a node death the launcher saw (`failure`) either way.

    A node that died of an exception nobody was told of (its failure record,
    RUN_DIR/failures, of this launch) makes the run 'node failed' naming that
    exception; with neither a summary nor a state to start from, a failure
    still gets a summary.json of its own (counters unknown: None).
    """
    from apex.coordination import SUMMARY_KEYS
    from apex.supervision import recorded_failure

    path = os.path.join(run_dir, "summary.json")
    summary = None
    if os.path.exists(path) and os.path.getmtime(path) >= _LAUNCH_TIME:
        with open(path) as f:
            summary = json.load(f)
    else:
        state = os.path.join(run_dir, "state.json")
        if os.path.exists(state):
            with open(state) as f:
                summary = json.load(f)
            summary.pop("counters", None)
            summary["stop_reason"] = summary.get("stop_reason") or reason
    if failure is None and (summary or {}).get("stop_reason") != "node failed":
        failure = recorded_failure(run_dir, since=_LAUNCH_TIME)
    if summary is None:
        if failure is None:
            return None
        summary = {key: None for key in SUMMARY_KEYS}
    if failure is not None:
        summary["stop_reason"] = "node failed"
        summary["failure"] = failure
    write_json_atomic(path, summary)
    return summary


def main(argv: list[str]) -> int:
    del argv
    logging.set_verbosity(logging.WARNING)
    from apex.output import VERBOSE_ENV, FilteredStdout, TolerantStream

    if _VERBOSE.value:
        os.environ[VERBOSE_ENV] = "1"
    sys.stdout.flush()
    sys.stdout = FilteredStdout(1, keep_all=_VERBOSE.value)  # whole lines, also in a pipe
    # A reader that went away (a killed `| tee`, a CI log collector) must not cut
    # the stop short: Launchpad's stop prints, and an EPIPE there would leave the
    # nodes running. Output is then dropped; the stop goes on.
    sys.stderr = TolerantStream(sys.stderr)
    launch_type = (
        flags.FLAGS.lp_launch_type if flags.FLAGS["lp_launch_type"].present else "local_mp"
    )
    if launch_type not in SUPPORTED_LAUNCH_TYPES:
        raise ConfigError("--lp_launch_type", launch_type, _launch_types_text())
    # Every clock a user sees counts from the launcher process's start.
    start_time = launch_time()
    if not _CONFIG.value:
        raise ConfigError("--config", None, "a config file, e.g. --config=configs/apex_cartpole.py")
    config, prepared = load_and_prepare(_CONFIG.value, _OVERRIDES)
    for note in [*prepared.warnings, *apex_config.unused_fields(config, _LAUNCHER.value)]:
        print(f"[apex] note: {note}", flush=True)
    if config.env.imports:
        # Node processes import env.imports too: a module next to the user's
        # command (the working directory) must be found there as it is here.
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if os.getcwd() not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *filter(None, paths)])
    session = placement = None
    if _LAUNCHER.value == "ray":
        session, placement = _connect_ray(config, launch_type)
    else:
        for name in ("ray_address", "ray_simulate_nodes"):
            if flags.FLAGS[name].present:
                raise ConfigError(
                    f"--{name}", flags.FLAGS[name].value, "given only with --launcher=ray"
                )
    try:
        return _launch(config, launch_type, start_time, session, placement, prepared.packages)
    finally:
        if session is not None:
            session.shutdown()


def _connect_ray(config: apex_config.ApexConfig, launch_type: str):
    """Connects to the Ray cluster and plans the placement, before anything is
    created; every refusal is a ConfigError (one line, exit 2)."""
    if flags.FLAGS["lp_launch_type"].present:
        raise ConfigError(
            "--lp_launch_type", launch_type, "no --lp_launch_type with --launcher=ray"
        )
    if _ISOLATE.value:
        raise ConfigError(
            "--isolate_network", True, "False with --launcher=ray (nodes talk across hosts)"
        )
    from apex.placement import PlacementError
    from launch import ray_launch

    session = ray_launch.connect(_RAY_ADDRESS.value, _RAY_SIMULATE.value, config)
    try:
        placement, wanted = ray_launch.plan(config, session)
        home = next(n for n in session.nodes if n.node_id == placement["learner"])
        if home.ip != session.launcher_ip:
            raise PlacementError(
                f"the learner's node {home.short} is not this host ({session.launcher_ip}); "
                "start the launcher on the learner's host: the run directory is written there"
            )
    except BaseException:
        session.shutdown()
        raise
    return session, (placement, wanted)


def _launch(config, launch_type, start_time, session, placement, env_packages=None) -> int:
    from apex import compat

    if _ISOLATE.value:
        from apex import netns

        if os.environ.get(netns.ENV_MARK) != "1":  # re-execute inside the namespace
            prefix = netns.unshare_command()
            env = dict(os.environ, **{netns.ENV_MARK: "1"})
            sys.stdout.flush()
            os.execvpe(
                prefix[0], [*prefix, sys.executable, "-m", "launch.train", *sys.argv[1:]], env
            )
        netns.loopback_up()
        print(f"[apex] isolated network namespace: interfaces {netns.interfaces()}", flush=True)

    from apex.ports import check_port_free
    from apex.run_dir import default_run_dir, prepare_run_dir

    if config.replay.port is not None:  # before anything is written
        check_port_free("replay.port", config.replay.port)
    run_dir = os.path.abspath(config.run_dir or default_run_dir(_CONFIG.value))
    try:
        resume = resume_checkpoint(config, run_dir, _RESUME.value)
    except checkpointing.CheckpointError as err:
        print(f"apex: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if resume is not None:
        check_limits_left(config, resume.state)
    run_dir = prepare_run_dir(run_dir, config, env_packages=env_packages)
    config.run_dir = run_dir
    # Heartbeats of a previous launch name dead pids: start without them.
    shutil.rmtree(os.path.join(run_dir, "heartbeats"), ignore_errors=True)
    shutil.rmtree(os.path.join(run_dir, "failures"), ignore_errors=True)  # and their failures

    # Only now: the program's modules import TensorFlow, Reverb and Launchpad (5 s
    # of CPU), which none of the refusals above (a taken port, a run_dir that cannot
    # be written, nothing to resume) needs.
    lp = compat.import_launchpad()
    from apex.coordination import SUMMARY_KEYS
    from launch import nodes
    from launch import program as program_lib

    program = program_lib.make_program(
        config, run_dir=run_dir, start_time=start_time, resume=resume
    )
    print(f"[apex] run_dir: {run_dir}", flush=True)
    if resume is not None:
        st = resume.state
        print(
            f"[apex] resuming from {os.path.relpath(resume.path, run_dir)}: learner step "
            f"{resume.step:,}, env steps {sum(st.get('actor_steps', {}).values()):,}, "
            f"{st.get('wall_seconds', 0.0):.1f} s so far (stop.* limits count from these)",
            flush=True,
        )
    if session is not None:
        launch_type = f"on Ray ({len(session.nodes)} nodes at {session.address})"
    print(
        f"[apex] launching {launch_type}: {config.agent}, {config.actor.num_actors} actors x "
        f"{config.actor.envs_per_actor} envs on {config.env.id}",
        flush=True,
    )
    print(f"[apex] replay: {apex_config.rate_limit_plan(config)}", flush=True)
    monitor = None
    manager = None
    ray_failure = None
    if session is not None:
        ray_failure = _run_on_ray(program, config, session, placement)
    elif launch_type == "local_mp":
        if _TERMINAL.value == "output_to_files":
            compat.set_output_to_files_dir(os.path.join(run_dir, "logs"))
            print(f"[apex] node output: {os.path.join(run_dir, 'logs')}/<node>", flush=True)
        else:
            compat.use_line_output()
        os.environ[nodes.LAUNCHER_PID_ENV] = str(os.getpid())
        manager = lp.launch(program, launch_type=launch_type, terminal=_TERMINAL.value)
        _record_signals()
        monitor = NodeMonitor(
            run_dir,
            on_death=lambda message: _stop_after_death(message),
            stopping=manager.stop_event().is_set,
        ).start()
    else:
        manager = lp.launch(program, launch_type=launch_type, serialize_py_nodes=False)
    failed = None
    try:
        if manager is not None:
            manager.wait()
    except Exception as err:  # noqa: BLE001 - a node failed: report it and still write the summary
        failed = err
    death = monitor.failure if monitor is not None else ray_failure
    remove_empty_stack_files(run_dir)
    summary = _finalize_summary(run_dir, "node failed" if failed else "stopped", death)
    # The one summary: summary.json as the run left it.
    if summary is not None:
        print(
            "[apex] summary: " + json.dumps({k: summary.get(k) for k in SUMMARY_KEYS}), flush=True
        )
    print(f"[apex] summary.json: {os.path.join(run_dir, 'summary.json')}", flush=True)
    if death is not None:
        failed = death
    elif summary is not None and summary.get("stop_reason") == "node failed":
        # The failure as summary.json names it (a launcher-side error, e.g. local_mt's
        # re-raised node exception, says less).
        failed = summary.get("failure") or failed or "see the node output above"
    if failed is not None:
        print(f"[apex] a node failed: {failed}", file=sys.stderr, flush=True)
    code = exit_code(summary, failed is not None)
    sys.stdout.close()
    return code


def _run_on_ray(program, config, session, placement) -> str | None:
    """Runs the program on Ray until it stops; returns the failure the launcher
    saw (a server node's host died, a node exited with an error), if any."""
    from apex.output import verbose, write_lines
    from apex.placement import PlacementError
    from launch import ray_launch

    def out(lines: list[bytes]) -> None:
        if lines:
            sys.stdout.flush()
            write_lines(1, lines)

    launcher = ray_launch.RayLauncher(
        program,
        config,
        session,
        *placement,
        out=out,
        tty=os.isatty(1),
        keep_all=verbose(),
    )

    def on_signal(signum, frame):
        if signum in _SIGNALS_SEEN and signum == signal.SIGINT:
            print(
                "[apex] second Ctrl-C: the stop goes on (the final checkpoint is being written)",
                flush=True,
            )
        _SIGNALS_SEEN.append(signum)
        launcher.request_stop()

    for sig in EXIT_SIGNAL:
        signal.signal(sig, on_signal)
    try:
        launcher.start()
    except PlacementError as err:
        launcher.close()
        return f"placement: {err}"
    print(f"[apex] placement: {launcher.placement_text()}", flush=True)
    launcher.wait()
    return launcher.failure


def remove_empty_stack_files(run_dir: str) -> None:
    """Every node opens RUN_DIR/stacks/<node>-<pid>.txt up front (SIGUSR1's handler
    needs an open file); those never written to are removed at the end."""
    folder = os.path.join(run_dir, "stacks")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        try:
            if os.path.getsize(path) == 0:
                os.remove(path)
        except OSError:
            continue
    try:
        os.rmdir(folder)  # only if nothing is left
    except OSError:
        pass


def launch_time() -> float:
    """Unix time this process started (what every clock of the run counts from)."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - psutil is a dependency; be safe anyway
        return _LAUNCH_TIME


def check_limits_left(config: apex_config.ApexConfig, state: dict) -> None:
    """Refuses (ConfigError) a resume whose stop limits the run has already used up:
    it would launch everything only to stop at once."""
    sc = config.stop
    used = {
        "stop.max_wall_seconds": (sc.max_wall_seconds, float(state.get("wall_seconds", 0.0)), "s"),
        "stop.max_actor_steps": (
            sc.max_actor_steps,
            sum(int(v) for v in state.get("actor_steps", {}).values()),
            "env steps",
        ),
        "stop.max_learner_steps": (
            sc.max_learner_steps,
            int(state.get("learner_steps", 0)),
            "learner steps",
        ),
    }
    for field, (limit, so_far, unit) in used.items():
        if limit is not None and so_far >= limit:
            raise ConfigError(
                field,
                limit,
                f"more than the {so_far:,.6g} {unit} the run already has (raise it with "
                f"--config.{field}=... to continue, or None for no limit)",
            )


def _stop_after_death(message: str) -> None:
    print(f"[apex] {message}; stopping the program", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # Launchpad's own orderly stop of every node


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing of what parse_argv leaves; a bad flag is one line and exit 2."""
    try:
        rest = parse_argv(argv)
        if not _only_defined_flags(rest[1:]):
            _import_flag_defining_modules()
        return flags.FLAGS(rest)
    except flags.Error as err:
        message = str(err)
        if message.startswith("flag --lp_launch_type="):  # Launchpad lists types apex refuses
            given = message.split("=", 1)[1].split(":", 1)[0]
            message = str(ConfigError("--lp_launch_type", given, _launch_types_text()))
            print(f"apex: invalid configuration: {message}", file=sys.stderr)
        else:
            print(f"apex: {message}{_flag_hint(message, argv)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


# With Launchpad's package, what launch.train imported at start before those imports
# were deferred (see apex.compat.define_launchpad_flags and _launch): between them (Launchpad,
# acme, TensorFlow, absltest) they define absl flags of their own, which a command
# line may name.
_FLAG_DEFINING_MODULES = ("apex.coordination", "apex.replay.inspect")


def _only_defined_flags(args: list[str]) -> bool:
    """Whether every flag `args` names (--name, --name=v, --noname) is defined now,
    and none lists every flag (--helpfull, --helpxml) or reads flags from a file.

    When not, parse_flags imports Launchpad and _FLAG_DEFINING_MODULES first: a
    flag only they define parses, an unknown one gets absl's suggestions from every
    flag, and --helpfull lists them all, as when they were imported at start. A
    refused config names only apex's and Launchpad's flags, and skips those imports.
    """
    for arg in args:
        if arg == "--":
            break
        if not arg.startswith("-"):
            continue
        name = arg.lstrip("-").split("=", 1)[0]
        if name in ("helpfull", "helpxml", "flagfile", "undefok"):
            return False
        if name in flags.FLAGS:
            continue
        if name.startswith("no") and name[2:] in flags.FLAGS and flags.FLAGS[name[2:]].boolean:
            continue
        return False
    return True


def _import_flag_defining_modules() -> None:
    compat.import_launchpad()
    for name in _FLAG_DEFINING_MODULES:
        importlib.import_module(name)


def _launch_types_text() -> str:
    return f"one of {', '.join(SUPPORTED_LAUNCH_TYPES)} (apex supports these launch types)"


def _flag_hint(message: str, argv: list[str]) -> str:
    """'; did you mean --config.actor.num_actors=4?' for a config field given as a flag."""
    import re

    match = re.search(r"Unknown command line flag '([^']+)'", message)
    if not match:
        return ""
    name = match.group(1)
    fields = [
        f"{section}.{field}"
        for section, value in vars(apex_config.ApexConfig()).items()
        for field in (vars(value) if hasattr(value, "__dataclass_fields__") else {})
        if field == name
    ] + [k for k in vars(apex_config.ApexConfig()) if k == name]
    if not fields:
        return ""
    value = next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), "...")
    return "; did you mean " + " or ".join(f"--config.{f}={value}" for f in fields) + "?"


def run() -> None:
    # Launchpad's stop window (SIGTERM to SIGKILL): room for the final checkpoint.
    from apex.lifecycle import STOP_WINDOW

    flags.FLAGS.set_default("lp_termination_notice_secs", int(STOP_WINDOW.kill_seconds))
    from apex.placement import PlacementError

    try:
        app.run(main, flags_parser=parse_flags)
    except ConfigError as err:
        print(f"apex: invalid configuration: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except PlacementError as err:  # --launcher=ray, before anything was created
        print(f"apex: the program does not fit the Ray cluster: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    run()
