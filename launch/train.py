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
import time

# Every clock of the run (wall_seconds, first_learner_step_seconds, stop limits,
# progress lines) counts from here: the entry point's start, not the start of a
# shell script that ran setup before `exec`-ing it (scripts/train.sh).
_LAUNCH_TIME = time.time()

# Entry-point only: quiet TensorFlow's C++ start-up logs before anything
# imports it (inherited by every node process). Errors still print.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
# Reverb imports distutils at start-up (reverb.platform.default.ensure_tf_install);
# setuptools' replacement of it costs 0.35 s of CPU per process here, Python
# 3.10's own 1 ms. Every node process inherits this.
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
# Fast kernels: TF 2.8 leaves oneDNN off on Linux (2.9 turns it on); with it the
# Nature-conv SGD step runs ~1.7x faster here. Set before TensorFlow's import,
# so every node inherits it; TF_ENABLE_ONEDNN_OPTS=0 in the environment turns
# it off (docs/performance.md).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# OpenBLAS (numpy's, and scipy's own copy, which TensorFlow imports when it is
# installed) starts a thread pool on import: one thread more and the launcher
# could not fork its nodes (launch/zygote.py). Every BLAS call of a node is
# small (TensorFlow runs the networks); one thread each, set before the imports.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

from absl import app, flags, logging  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)


# Launchpad's flags (--lp_launch_type, ...) without its package's imports
# (apex.compat says how): most of the suite's launch.train processes only
# refuse a bad flag or config, and need none of TensorFlow, Reverb or Courier.
from apex import compat  # noqa: E402

compat.define_launchpad_flags()


from apex import (  # noqa: E402
    STOP_WINDOW,
    VERBOSE_ENV,
    ApexConfig,
    ConfigError,
    FilteredStdout,
    MetricSinks,
    NodeMonitor,
    PlacementError,
    StopReason,
    TolerantStream,
    apply_override,
    check_port_free,
    checkpointing,
    default_run_dir,
    load_config_file,
    netns,
    prepare_run_dir,
    rate_limit_plan,
    unused_fields,
    validate,
    verbose,
    write_lines,
)
from launch import (  # noqa: E402
    cli_flags,
    node_restarts,
    program_restarts,
    ray_connect,
    ray_launch,
)
from launch.exit_codes import (  # noqa: E402
    EXIT_BAD_INPUT,
    EXIT_SIGNAL,
    SIGNALS_SEEN,
    exit_code,
    record_signals,
)
from launch.node_env import LAUNCHER_PID_ENV  # noqa: E402
from launch.resume import check_limits_left, resume_checkpoint  # noqa: E402
from launch.summary import finalize_summary, remove_empty_stack_files  # noqa: E402
from launch.zygote import Zygote, launch_nodes, thread_count  # noqa: E402

_CONFIG = flags.DEFINE_string("config", None, "Path of a config file with get_config().")
_TERMINAL = flags.DEFINE_enum(
    "terminal",
    "current_terminal",
    ["current_terminal", "output_to_files"],
    "Where local_mp node output goes (output_to_files: one file per node in RUN_DIR/logs).",
)

_NODE_START = flags.DEFINE_enum(
    "node_start",
    "fork",
    ["fork", "spawn"],
    "How local_mp starts node processes. fork: from one warm process that imported "
    "TensorFlow, Reverb and Launchpad once (launch/zygote.py); spawn: a fresh Python "
    "process per node, each paying those imports (README 'How nodes start').",
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

_RAY_NODE_IP = flags.DEFINE_string(
    "ray_node_ip",
    "",
    "With --launcher=ray: this host's address in the Ray cluster (the one its Ray node was "
    "started with, `ray start --node-ip-address`). '': the address that routes to the head.",
)

_OVERRIDES: list[tuple[str, str]] = []
# The launcher's next life after a node's failure (launch.program_restarts).
_NEXT_LIFE: list[program_restarts.Restart] = []


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
    config = load_config_file(path)
    for field, value in overrides:
        apply_override(config, field, value)
    validate(config)
    # Only now: a config refused above does not pay Gymnasium's import.
    from apex import check_overlap, check_vectorization, prepare_env
    from apex.agents import check_torso

    prepared = prepare_env(config)
    check_torso(config, prepared.spec)
    check_vectorization(config.env)  # ConfigError where the mode cannot run this env
    check_overlap(config)  # actor.overlap: two halves stepped in turn
    return config, prepared


def vector_line(config: ApexConfig) -> str:
    """How the actors step their envs, for the launch line: the resolved env.vectorization."""
    from apex import check_vectorization

    mode = check_vectorization(config.env)
    how = "" if config.env.vectorization == mode else f" ({config.env.vectorization})"
    return f"stepped as one vector env: {mode}{how}"


def load_config(path: str, overrides: list[tuple[str, str]]) -> ApexConfig:
    """The config `load_and_prepare` returns, checked as before a launch."""
    return load_and_prepare(path, overrides)[0]


def main(argv: list[str]) -> int:
    del argv
    logging.set_verbosity(logging.WARNING)
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
    if launch_type not in cli_flags.SUPPORTED_LAUNCH_TYPES:
        raise ConfigError("--lp_launch_type", launch_type, cli_flags.launch_types_text())
    # Every clock a user sees counts from the entry point's start (_LAUNCH_TIME).
    start_time = _LAUNCH_TIME
    if not _CONFIG.value:
        raise ConfigError("--config", None, "a config file, e.g. --config=configs/apex_cartpole.py")
    config, prepared = load_and_prepare(_CONFIG.value, _OVERRIDES)
    for note in [*prepared.warnings, *unused_fields(config, _LAUNCHER.value)]:
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
        for name in ("ray_address", "ray_simulate_nodes", "ray_node_ip"):
            if flags.FLAGS[name].present:
                raise ConfigError(
                    f"--{name}", flags.FLAGS[name].value, "given only with --launcher=ray"
                )
    try:
        code = _launch(config, launch_type, start_time, session, placement, prepared.packages)
    finally:
        if session is not None:
            session.shutdown()
    if _NEXT_LIFE:  # the program failed and starts again (launch.program_restarts)
        _NEXT_LIFE[0].execute()
    return code


def _connect_ray(config: ApexConfig, launch_type: str):
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
    return ray_connect.open_session(
        config, _RAY_ADDRESS.value, _RAY_SIMULATE.value, _RAY_NODE_IP.value
    )


def _launch(config, launch_type, start_time, session, placement, env_packages=None) -> int:
    if _ISOLATE.value:
        if os.environ.get(netns.ENV_MARK) != "1":  # re-execute inside the namespace
            prefix = netns.unshare_command()
            env = dict(os.environ, **{netns.ENV_MARK: "1"})
            sys.stdout.flush()
            os.execvpe(
                prefix[0], [*prefix, sys.executable, "-m", "launch.train", *sys.argv[1:]], env
            )
        netns.loopback_up()
        print(f"[apex] isolated network namespace: interfaces {netns.interfaces()}", flush=True)

    # Threads now, before anything below may start TensorFlow's runtime (a resume
    # reads its checkpoint through TensorFlow): a fork is safe only with no more.
    threads_at_launch = thread_count()
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
    program_restarts.note_resume(run_dir, resume)
    run_dir = prepare_run_dir(run_dir, config, env_packages=env_packages)
    config.run_dir = run_dir
    # Heartbeats of a previous launch name dead pids: start without them.
    shutil.rmtree(os.path.join(run_dir, "heartbeats"), ignore_errors=True)
    shutil.rmtree(os.path.join(run_dir, "failures"), ignore_errors=True)  # and their failures

    # Only now: the program's modules import TensorFlow, Reverb and Launchpad (5 s
    # of CPU), which none of the refusals above (a taken port, a run_dir that cannot
    # be written, nothing to resume) needs.
    compat.import_launchpad()
    from launch import program  # noqa: F401 - every node module, imported before a fork

    zygote = None
    if session is None and launch_type == "local_mp" and _NODE_START.value == "fork":
        # Here: everything a node imports is imported, and this process has made no
        # thread, channel, TensorFlow runtime or Reverb object yet (make_program
        # makes Reverb tables): nodes are forked from this state (launch/zygote.py).
        threads = thread_count()
        if config.learner.jit_compile:
            print(
                "[apex] node start: each node a process of its own (learner.jit_compile: "
                "TensorFlow cannot find the XLA-compiled step's function in a process forked "
                "after its import; a spawned learner runs it)",
                flush=True,
            )
        elif threads > threads_at_launch:
            print(
                f"[apex] node start: each node a process of its own (this launcher has "
                f"{threads} threads, {threads_at_launch} when the launch began: a fork could "
                "copy a lock one of them holds)",
                flush=True,
            )
        else:
            zygote = Zygote.start()
    try:
        return _launch_program(
            config, launch_type, start_time, session, placement, run_dir, resume, zygote
        )
    finally:
        if zygote is not None:
            zygote.close()


def _launch_program(
    config, launch_type, start_time, session, placement, run_dir, resume, zygote
) -> int:
    lp = compat.import_launchpad()
    from apex import SUMMARY_KEYS
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
        f"{config.actor.envs_per_actor} envs on {config.env.id}, {vector_line(config)}",
        flush=True,
    )
    print(f"[apex] replay: {rate_limit_plan(config)}", flush=True)
    sinks = MetricSinks.start(config, run_dir)
    monitor = None
    manager = None
    ray_failure, ray_failure_time = None, None
    if session is not None:
        ray_failure, ray_failure_time = _run_on_ray(program, config, session, placement)
    elif launch_type == "local_mp":
        if _TERMINAL.value == "output_to_files":
            compat.set_output_to_files_dir(os.path.join(run_dir, "logs"))
            print(f"[apex] node output: {os.path.join(run_dir, 'logs')}/<node>", flush=True)
        if zygote is not None:
            compat.use_node_launcher(
                _TERMINAL.value, launch_nodes(zygote, _TERMINAL.value, verbose())
            )
        elif _TERMINAL.value != "output_to_files":
            compat.use_line_output()
        if zygote is not None or _TERMINAL.value != "output_to_files":
            # Every node's wrapper can start a dead actor process again (launch.node_restarts).
            os.environ.update(node_restarts.policy_env(config))
        os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
        manager = lp.launch(program, launch_type=launch_type, terminal=_TERMINAL.value)
        record_signals()
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
    death_time = monitor.failure_time if monitor is not None else ray_failure_time
    remove_empty_stack_files(run_dir)
    summary = finalize_summary(
        run_dir,
        (StopReason.NODE_FAILED if failed else StopReason.STOPPED).value,
        death,
        since=_LAUNCH_TIME,
        failure_time=death_time,
    )
    # The one summary: summary.json as the run left it.
    if summary is not None:
        print(
            "[apex] summary: " + json.dumps({k: summary.get(k) for k in SUMMARY_KEYS}), flush=True
        )
    print(f"[apex] summary.json: {os.path.join(run_dir, 'summary.json')}", flush=True)
    if summary is not None and summary.get("stop_reason") == StopReason.NODE_FAILED.value:
        # The failure as summary.json names it: the first one recorded (a
        # launcher-side error, e.g. local_mt's re-raised node exception, says less).
        failed = summary.get("failure") or death or failed or "see the node output above"
    elif death is not None:
        failed = death
    if failed is not None:
        print(f"[apex] a node failed: {failed}", file=sys.stderr, flush=True)
        # The failure stopped the program (the first stop reason recorded), not a
        # user's Ctrl-C (a SIGTERM may be Launchpad's own stop: the reason tells).
        first_reason = (summary or {}).get("stop_reason")
        if first_reason == StopReason.NODE_FAILED.value and signal.SIGINT not in SIGNALS_SEEN:
            life = (death_time or time.time()) - _LAUNCH_TIME
            restart = program_restarts.plan(run_dir, config, summary, str(failed), life)
            if restart is not None:
                _NEXT_LIFE.append(restart)
    program_restarts.add_to_summary(run_dir, summary)
    code = exit_code(summary, failed is not None)
    if sinks is not None:
        sinks.close(summary, code)
    sys.stdout.close()
    return code


def _run_on_ray(program, config, session, placement) -> tuple[str | None, float | None]:
    """Runs the program on Ray until it stops; returns the failure the launcher
    saw (a server node's host died, a node exited with an error), if any, and
    when it saw it (Unix time)."""

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
        if signum in SIGNALS_SEEN and signum == signal.SIGINT:
            print(
                "[apex] second Ctrl-C: the stop goes on (the final checkpoint is being written)",
                flush=True,
            )
        SIGNALS_SEEN.append(signum)
        launcher.request_stop()

    for sig in EXIT_SIGNAL:
        signal.signal(sig, on_signal)
    try:
        launcher.start()
    except PlacementError as err:
        launcher.close()
        return f"placement: {err}", time.time()
    print(f"[apex] placement: {launcher.placement_text()}", flush=True)
    launcher.wait()
    return launcher.failure, launcher.failure_time


def _stop_after_death(message: str) -> None:
    print(f"[apex] {message}; stopping the program", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # Launchpad's own orderly stop of every node


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing of what parse_argv leaves; a bad flag is one line and exit 2."""
    try:
        rest = parse_argv(argv)
        if not cli_flags.only_defined_flags(rest[1:]):
            cli_flags.import_flag_defining_modules()
        return cli_flags.parse_absl_flags(rest)
    except flags.Error as err:
        message = str(err)
        if message.startswith("flag --lp_launch_type="):  # Launchpad lists types apex refuses
            given = message.split("=", 1)[1].split(":", 1)[0]
            message = str(ConfigError("--lp_launch_type", given, cli_flags.launch_types_text()))
            print(f"apex: invalid configuration: {message}", file=sys.stderr)
        else:
            print(f"apex: {message}{cli_flags.flag_hint(message, argv)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def run() -> None:
    # Launchpad's stop window (SIGTERM to SIGKILL): room for the final checkpoint.
    flags.FLAGS.set_default("lp_termination_notice_secs", int(STOP_WINDOW.kill_seconds))
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
