r"""Trained policies: `python -m tools.policy COMMAND PATH [options]`.

COMMAND
  export RUN_DIR --out=DIR [--which=best|latest|average] [--force]
               the policy of the run's newest complete checkpoint (RUN_DIR may
               also be one checkpoint, RUN_DIR/checkpoints/ckpt-N) as a
               self-contained folder: weights.npz and policy.json
               (apex.trained_policy). --which=best (default): the best evaluated
               parameters the checkpoint keeps; latest: its online weights;
               average: their average (runs with evaluation.weights='average').
               policy.json's source.parameters says which.
  play DIR [--episodes=N] [--seed=S] [--video=FILE.mp4 | --gif=FILE.gif]
               N greedy episodes (default 10) of an exported policy in the env
               as apex's evaluator makes it, with its episode cap and seeding
               (episode i from seed S + i): each return and the mean. The
               default seed is that of the evaluation recorded for the policy's
               version, so with that evaluation's episode count the mean is the
               recorded evaluation return. --video records each episode with
               gymnasium's RecordVideo (needs moviepy); --gif collects the
               frames with gymnasium's RenderCollection into one GIF (Pillow;
               at most GIF_MAX_FRAMES frames, 320 pixels wide).

Errors are one line on stderr: exit code 2 for a path that is not a run,
checkpoint or policy folder, or bad options; 1 when the env cannot be made or
recording fails. Ctrl-C ends the tool with 130 and no traceback.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Recording renders to arrays (render_mode='rgb_array'): no window. SDL's display probe
# (pygame, for classic-control and Box2D envs) prints an error line without a desktop.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
# Without this SDL takes over SIGINT and SIGTERM: Ctrl-C would not stop a recording.
os.environ.setdefault("SDL_NO_SIGNAL_HANDLERS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

COMMANDS = ("export", "play")
USAGE = (
    "usage: python -m tools.policy export RUN_DIR --out=DIR [--which=best|latest|average] [--force]\n"
    "       python -m tools.policy play DIR [--episodes=N] [--seed=S] "
    "[--video=FILE.mp4 | --gif=FILE.gif]"
)
GIF_MAX_WIDTH = 320
"""GIF frames are scaled down to this width (a GIF holds every frame in full)."""
GIF_MAX_FRAMES = 3000
"""Frames a GIF keeps (about 100 KB of memory each until it is written; 60 s at
50 fps): later episodes are still played, not recorded."""


class _Usage(Exception):
    """A clear one-line error; exit code 2 (bad input) or 1 (it failed)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as the other tools
        raise _Usage(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m tools.policy", add_help=True, description=__doc__)
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    e = sub.add_parser("export", help="export a run's policy to a folder")
    e.add_argument("run_dir")
    e.add_argument("--which", choices=("best", "latest", "average"), default="best")
    e.add_argument("--out", required=True)
    e.add_argument("--force", action="store_true", help="replace a policy folder at --out")
    pl = sub.add_parser("play", help="greedy episodes of an exported policy")
    pl.add_argument("policy_dir")
    pl.add_argument("--episodes", type=int, default=10)
    pl.add_argument("--seed", type=int, default=None)
    out = pl.add_mutually_exclusive_group()
    out.add_argument("--video", default=None)
    out.add_argument("--gif", default=None)
    return p


def export(args: argparse.Namespace) -> int:
    from apex import export_policy

    meta = export_policy(args.run_dir, args.out, args.which, overwrite=args.force)
    ret = meta["eval_return"]
    ev = meta.get("evaluation") or {}
    how = (
        f"evaluation return {ret:.2f}"
        + (
            f" ({ev['episodes']} episodes from seed {ev['seed']})"
            if ev.get("seed") is not None
            else ""
        )
        if ret is not None
        else "no evaluation recorded for this version"
    )
    print(
        f"exported the {args.which} policy of {meta['source']['checkpoint']}: {meta['agent']} on "
        f"{meta['env_id']}, version {meta['version']:,}, {how}"
    )
    print(os.path.abspath(args.out))
    return 0


def _check_recorder(args: argparse.Namespace) -> None:
    import importlib.util

    if args.video is not None and importlib.util.find_spec("moviepy") is None:
        raise _Usage(
            "--video needs moviepy, which is not installed (pip install moviepy; "
            "--gif=FILE.gif records without it)"
        )
    if args.gif is not None and importlib.util.find_spec("PIL") is None:
        raise _Usage("--gif needs Pillow, which is not installed (pip install pillow)")
    for path in (args.video, args.gif):
        if path is not None:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise _Usage(f"{path}: the folder {folder} does not exist")


def _greedy_episode(
    policy: Any, env: Any, seed: int, cap: int, on_step: Callable[[], None]
) -> float:
    """One greedy episode as apex.evaluation.evaluate runs each of its episodes."""
    from apex import to_observation

    obs = to_observation(env.reset(seed=seed)[0])
    on_step()
    policy.reset()
    total, steps = 0.0, 0
    while True:
        obs, r, term, trunc, _ = env.step(policy.act(obs))
        on_step()
        total += r
        steps += 1
        if term or trunc or steps >= cap:
            return total


def _recorded_returns(policy: Any, args: argparse.Namespace, seed: int) -> tuple[list, list]:
    """Returns of the episodes played with a recorder, and the files written.
    Each episode has a fresh env, as the evaluator's."""
    import gymnasium as gym

    returns, files, frames = [], [], []
    stats = {"dropped": 0, "fps": 30}
    base, _ = os.path.splitext(os.path.abspath(args.video or args.gif))
    for i in range(args.episodes):
        try:
            returns.append(_recorded_episode(policy, args, seed + i, base, i, frames, stats))
        except gym.error.DependencyNotInstalled as err:
            raise _Usage(f"recording needs a package that is not installed: {err}") from None
        if args.video:
            written = f"{base}.{i}-episode-0.mp4"
            final = args.video if args.episodes == 1 else f"{base}-episode-{i}.mp4"
            if not os.path.isfile(written):
                raise _Usage(f"no video was written for episode {i} ({written})", code=1)
            os.replace(written, final)
            files.append(final)
        print(f"episode {i} (seed {seed + i}): return {returns[-1]:g}", flush=True)
    if args.gif:
        if stats["dropped"]:
            print(
                f"[tools.policy] the GIF holds the first {GIF_MAX_FRAMES:,} frames; "
                f"{stats['dropped']:,} later ones are left out",
                file=sys.stderr,
            )
        _save_gif(frames, args.gif, stats["fps"])
        files.append(args.gif)
    return returns, files


def _recorded_episode(
    policy: Any,
    args: argparse.Namespace,
    seed: int,
    base: str,
    i: int,
    frames: list,
    stats: dict[str, Any],
) -> float:
    """Episode i (from `seed`) in a fresh env, recorded: RecordVideo writes
    BASE.i-episode-0.mp4 when the env closes; RenderCollection's frames go to
    `frames` (stats: frames left out past GIF_MAX_FRAMES, the env's fps)."""
    import gymnasium as gym

    env = policy.make_env(render_mode="rgb_array")
    try:
        cap = policy.episode_cap(env)
        fps = stats["fps"] = env.metadata.get("render_fps") or 30
        drain: Callable[[], None] = lambda: None  # noqa: E731
        if args.video:
            with warnings.catch_warnings():  # "overwriting existing videos at": the folder exists
                warnings.simplefilter("ignore")
                env = gym.wrappers.RecordVideo(
                    env,
                    video_folder=os.path.dirname(base),
                    name_prefix=f"{os.path.basename(base)}.{i}",
                    episode_trigger=lambda _: True,
                    fps=fps,
                    disable_logger=True,
                )
        else:
            env = gym.wrappers.RenderCollection(env, pop_frames=True, reset_clean=False)

            def drain(env: Any = env) -> None:
                for frame in env.render():  # the frames since the last call
                    if len(frames) < GIF_MAX_FRAMES:
                        frames.append(_gif_frame(frame))
                    else:
                        stats["dropped"] += 1

        return _greedy_episode(policy, env, seed, cap, drain)
    finally:
        env.close()  # RecordVideo writes the episode's file here


def _gif_frame(frame: Any) -> Any:
    from PIL import Image

    image = Image.fromarray(frame)
    if image.width > GIF_MAX_WIDTH:
        height = max(1, round(image.height * GIF_MAX_WIDTH / image.width))
        image = image.resize((GIF_MAX_WIDTH, height))
    return image.convert("P", palette=Image.ADAPTIVE)


def _save_gif(frames: list, path: str, fps: float) -> None:
    if not frames:
        raise _Usage("no frames were rendered: nothing to write to the GIF", code=1)
    duration = max(20, int(round(1000 / fps)))  # GIF delays are 10 ms units; < 20 ms is slowed
    frames[0].save(
        path, save_all=True, append_images=frames[1:], duration=duration, loop=0, optimize=False
    )


def play(args: argparse.Namespace) -> int:
    from apex import load_policy

    if args.episodes < 1:
        raise _Usage(f"--episodes={args.episodes}: at least 1")
    _check_recorder(args)
    policy = load_policy(args.policy_dir)
    seed = policy.default_seed(args.seed)
    if policy.config.evaluation.epsilon:
        print(
            f"[tools.policy] the run evaluated with evaluation.epsilon="
            f"{policy.config.evaluation.epsilon:g}; these episodes are greedy",
            file=sys.stderr,
        )
    files: list[str] = []
    if args.video or args.gif:
        returns, files = _recorded_returns(policy, args, seed)
    else:
        returns = [float(r) for r in policy.evaluate(args.episodes, seed)]
        for i, r in enumerate(returns):
            print(f"episode {i} (seed {seed + i}): return {r:g}")
    mean = sum(returns) / len(returns)
    print(
        f"mean return {mean:.2f} over {len(returns)} episodes (seeds {seed}..{seed + len(returns) - 1}); "
        f"{policy.metadata.get('agent')} on {policy.env_id}, version {policy.version:,}"
    )
    ev = policy.metadata.get("evaluation") or {}
    if policy.eval_return is not None:
        recorded = f"recorded evaluation return of this version: {policy.eval_return:.2f}"
        if ev.get("seed") is not None:
            recorded += f" ({ev.get('episodes')} episodes from seed {ev['seed']})"
        print(recorded)
    for path in files:
        print(f"recorded: {path}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in COMMANDS:
        if len(argv) >= 2 and argv[1] in ("-h", "--help"):
            print(__doc__)
            return 0
        print(USAGE, file=sys.stderr)
        return 2
    from apex import ConfigError, PolicyError

    try:
        args = _parser().parse_args(argv[1:])
        return export(args) if args.command == "export" else play(args)
    except _Usage as err:
        print(f"tools.policy: {err}", file=sys.stderr)
        return err.code
    except PolicyError as err:
        print(f"tools.policy: {err}", file=sys.stderr)
        return 2
    except ConfigError as err:  # the env cannot be made here (a package missing, ...)
        print(f"tools.policy: cannot make the policy's env: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # e.g. --gif in a folder that cannot be written
        where = f"{err.filename}: " if err.filename else ""
        print(f"tools.policy: {where}{err.strerror or err}", file=sys.stderr)
        return 1


def run(argv: list[str] | None = None) -> int:
    """main(argv) with Ctrl-C ending the tool with exit code 130 and no traceback
    (what tools.run_tool does for the absl tools; this one parses with argparse)."""
    try:
        return main(sys.argv if argv is None else argv)
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run())
