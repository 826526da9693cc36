"""The Reverb table an agent writes and samples, and the item layouts it can hold:
n-step transitions and sequences (signatures, column layouts, unpacking; the
writer packs: apex.replay.writer), the prioritized selector and the rate limiter. Which table and which signature a
program uses is its agent's builder's choice (apex.agents): names and
signatures come in as arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import reverb
import tensorflow as tf

from apex.config import ApexConfig, effective_error_buffer
from apex.replay.frame_codec import compresses, decode_blocks, is_blocks, sequence_block, tf_decode
from apex.specs import EnvSpec


def _provenance() -> dict[str, tf.TensorSpec]:
    # Which actor and global env slot, its epsilon, the parameter version the
    # (first) action was chosen with and the insertion time (unix s).
    return {
        "actor": tf.TensorSpec([], tf.int32),
        "slot": tf.TensorSpec([], tf.int32),
        "epsilon": tf.TensorSpec([], tf.float32),
        "version": tf.TensorSpec([], tf.int64),
        "insert_time": tf.TensorSpec([], tf.float64),
    }


# A stored transition is packed into three columns: Reverb's cost per item grows
# with its columns (bench, this machine: 10 columns -> 3 made inserts 1.3x and
# sampling 2.4x faster, and the server's memory per item 2.3x smaller).
# `unpack_transitions` gives back the ten named fields.
TRANSITION_SCALARS = ("action", "reward", "discount", "epsilon")  # float32 column
TRANSITION_PROVENANCE = ("actor", "slot", "version", "insert_time")  # float64 column (exact ints)
_FIELD_DTYPES = {"action": "int32", "actor": "int32", "slot": "int32", "version": "int64"}


# Vector observations in one row: Reverb's cost per sampled item
# grows with its columns (a sampled item is one chunk slice and one tensor per
# column), so an Ape-X transition on a small vector observation is one float64
# column `row` = [obs, next_obs, TRANSITION_SCALARS, TRANSITION_PROVENANCE]:
# the learner's sampling CPU per item 11.6 -> 5.6 us (bench, this machine, batch
# 256). float64 holds every value of the observation dtypes it takes exactly.
ROW_MAX_OBSERVATION = 512  # elements of a 1-D observation stored in a row at most


def stores_rows(config: ApexConfig, spec: EnvSpec) -> bool:
    """True if `config`'s transitions are stored as one row each (`row_signature`):
    replay.transition_layout is 'auto', the observation is 1-D with at most
    ROW_MAX_OBSERVATION elements and a dtype float64 holds exactly (bool,
    integers and floats of up to 32 bits, float64); otherwise the three columns."""
    shape, dtype = tuple(spec.observation_shape), np.dtype(spec.observation_dtype)
    exact = dtype.kind == "b" or (
        dtype.kind in "iuf" and (dtype.itemsize <= 4 or dtype == np.float64)
    )
    return (
        config.replay.transition_layout == "auto"
        and not stores_frames(config, spec)
        and len(shape) == 1
        and shape[0] <= ROW_MAX_OBSERVATION
        and exact
    )


ROW_PREFIX = "row_"  # the row column's name: ROW_PREFIX + the observation's dtype


def row_column(data: Any) -> str | None:
    """The row column's name among `data`'s keys (a signature or an item), or None."""
    keys = data if isinstance(data, (dict, set, list, tuple)) else ()
    return next((k for k in keys if isinstance(k, str) and k.startswith(ROW_PREFIX)), None)


def row_signature(spec: EnvSpec) -> dict[str, tf.TensorSpec]:
    """Per-item signature of a transition stored as one row: `row_<obs dtype>`
    [2D + 8] float64 (obs, next_obs, TRANSITION_SCALARS, TRANSITION_PROVENANCE;
    D = the observation's size; the name keeps the observation's dtype, so a
    row unpacks to the observations the actor saw without the env spec)."""
    d = int(spec.observation_shape[0])
    width = 2 * d + len(TRANSITION_SCALARS) + len(TRANSITION_PROVENANCE)
    name = ROW_PREFIX + np.dtype(spec.observation_dtype).name
    return {name: tf.TensorSpec([width], tf.float64)}


def transition_signature(spec: EnvSpec) -> dict[str, tf.TensorSpec]:
    """Per-item signature of a stored transition: `obs_pair` [2, *obs] holds obs
    and next_obs; `scalars` [4] float32 holds TRANSITION_SCALARS; `provenance`
    [4] float64 holds TRANSITION_PROVENANCE (integers are exact in float64)."""
    return {
        "obs_pair": tf.TensorSpec(
            (2, *spec.observation_shape), tf.as_dtype(spec.observation_dtype)
        ),
        "scalars": tf.TensorSpec([len(TRANSITION_SCALARS)], tf.float32),
        "provenance": tf.TensorSpec([len(TRANSITION_PROVENANCE)], tf.float64),
    }


# Frames stored once: with stacked image observations (env.frame_stack
# = K > 1, the stack on axis 0), an actor writes each slot's frames into Reverb
# once, as a stream of single frames, and a transition references 2K of them:
# the K-frame window ending at obs's newest frame, and the one ending at
# next_obs's (apex.replay.writer.TransitionWriter.start_frames). Two columns,
# `obs_frames` and `next_obs_frames` [K, *frame], one window each: Reverb 0.7
# merges the refs of one item column into chunk slices assuming they are
# consecutive steps, so two overlapping windows cannot share one. The scalars
# and the provenance share one float64 column `meta` (float32 values and the
# integers are exact in it): one column fewer per item is ~250 B less of
# Reverb's per-item memory (figures in docs/performance.md).
def stores_frames(config: ApexConfig, spec: EnvSpec) -> bool:
    """True if `config`'s transitions store each frame once (frame windows):
    replay.frame_storage is 'auto' and the observation is a stack of
    env.frame_stack > 1 frames on its first axis; otherwise the packed layout."""
    k = int(config.env.frame_stack or 1)
    mode = config.replay.frame_storage
    shape = tuple(spec.observation_shape)
    return mode == "auto" and k > 1 and len(shape) >= 2 and shape[0] == k


def frame_transition_signature(
    spec: EnvSpec, compression: str = "none"
) -> dict[str, tf.TensorSpec]:
    """Per-item signature of a transition whose frames are stored once:
    `obs_frames` and `next_obs_frames` [K, *frame] (each references K frames of
    its slot's frame stream; [K] tf.string, one compressed frame each, with
    replay.frame_compression: apex.replay.frame_codec), and `meta` [8]
    float64: TRANSITION_SCALARS then TRANSITION_PROVENANCE."""
    if compresses(compression):
        stack = tf.TensorSpec(spec.observation_shape[:1], tf.string, name=f"frames:{compression}")
    else:
        stack = tf.TensorSpec(spec.observation_shape, tf.as_dtype(spec.observation_dtype))
    width = len(TRANSITION_SCALARS) + len(TRANSITION_PROVENANCE)
    return {
        "obs_frames": stack,
        "next_obs_frames": stack,
        "meta": tf.TensorSpec([width], tf.float64),
    }


def unpack_item(data: dict) -> dict:
    """One item's fields by name (numpy): a packed transition or a sequence of
    the frame layout unpacked, other items (packed R2D2 sequences) as they are."""
    if not ({"obs_pair", "obs_frames"} & set(data) or row_column(data)):
        return data
    batched = {k: np.asarray(v)[None] for k, v in data.items()}
    unpack = unpack_sequences if "floats" in data else unpack_transitions
    return {k: v[0] for k, v in unpack(batched).items()}


def _frames(value: Any, xp: Any, obs: tuple | None) -> Any:
    """A frame column as arrays: compressed blocks decoded (numpy: from their
    headers; tensorflow: `obs` = (shape per item, dtype), the learner's), other
    columns as they are."""
    if not is_blocks(value):
        return value
    if xp is np:
        return decode_blocks(value)
    if obs is None:
        raise ValueError("compressed frames in the learner's input need obs=(shape, dtype)")
    return tf_decode(value, tuple(obs[0]), obs[1])


def unpack_transitions(data: dict, xp: Any = np, obs: tuple | None = None) -> dict:
    """The ten named fields of packed transitions with a leading batch axis
    (obs, action, reward, discount, next_obs, epsilon, actor, slot, version,
    insert_time); `xp` is numpy (tools) or tensorflow (the learner's input;
    `obs` = (stack shape, dtype) when frames are compressed)."""
    if "obs_frames" in data:  # frames stored once: the stacks (decoded if compressed)
        pair = {
            "obs": _frames(data["obs_frames"], xp, obs),
            "next_obs": _frames(data["next_obs_frames"], xp, obs),
        }
        k = len(TRANSITION_SCALARS)
        scalars = data["meta"][:, :k]
        data = {
            "scalars": scalars.astype(np.float32) if xp is np else tf.cast(scalars, tf.float32),
            "provenance": data["meta"][:, k:],
        }
    elif row_column(data):  # one row per item: obs, next_obs, scalars, provenance
        name = row_column(data)
        row, dtype = data[name], name[len(ROW_PREFIX) :]
        d = (int(row.shape[-1]) - len(TRANSITION_SCALARS) - len(TRANSITION_PROVENANCE)) // 2
        k = 2 * d + len(TRANSITION_SCALARS)
        o, n = row[:, :d], row[:, d : 2 * d]
        if xp is np:
            pair = {"obs": o.astype(dtype), "next_obs": n.astype(dtype)}
        else:
            pair = {"obs": tf.cast(o, dtype), "next_obs": tf.cast(n, dtype)}
        scalars = row[:, 2 * d : k]
        data = {
            "scalars": scalars.astype(np.float32) if xp is np else tf.cast(scalars, tf.float32),
            "provenance": row[:, k:],
        }
    elif "obs_pair" in data:
        pair = {"obs": data["obs_pair"][:, 0], "next_obs": data["obs_pair"][:, 1]}
    else:
        return data
    cast = (lambda x, t: x.astype(t)) if xp is np else (lambda x, t: tf.cast(x, t))
    out = dict(pair)
    for column, names in (("scalars", TRANSITION_SCALARS), ("provenance", TRANSITION_PROVENANCE)):
        for i, name in enumerate(names):
            value = data[column][:, i]
            out[name] = cast(value, _FIELD_DTYPES[name]) if name in _FIELD_DTYPES else value
    return out


def sequence_signature(spec: EnvSpec, length: int, lstm_size: int) -> dict[str, tf.TensorSpec]:
    """Per-item signature of a stored R2D2 sequence of `length` steps.

    Step t holds obs_t, the action taken, the reward r_t, the discount (gamma,
    or 0 where the episode terminated at t) and mask_t (1 for a real step, 0 for
    padding after the episode's end). state_h/state_c are the LSTM state the
    actor had before step 0; start_step is step 0's index in its episode.
    """
    obs = tf.TensorSpec((length, *spec.observation_shape), tf.as_dtype(spec.observation_dtype))
    return {
        "obs": obs,
        "action": tf.TensorSpec([length], tf.int32),
        "reward": tf.TensorSpec([length], tf.float32),
        "discount": tf.TensorSpec([length], tf.float32),
        "mask": tf.TensorSpec([length], tf.float32),
        "state_h": tf.TensorSpec([lstm_size], tf.float32),
        "state_c": tf.TensorSpec([lstm_size], tf.float32),
        "start_step": tf.TensorSpec([], tf.int32),
        **_provenance(),
    }


# R2D2 on image observations: consecutive sequences of a
# slot overlap by L - P steps, and the packed layout stores every step's
# observation in each sequence that covers it (twice with R2D2's 80/40). With
# replay.frame_storage='auto' an actor writes each slot's observations into
# Reverb once, as a stream of one observation per env step (padding after an
# episode's end: zero observations appended to the stream), and a sequence's
# `obs_frames` column references the L consecutive steps it covers: the
# overlap lies in chunks shared by the items. Everything else is packed into
# two squeezed columns (Reverb's cost per item grows with its columns): `floats`
# float32 [4L + 2H] (SEQUENCE_STEP_FIELDS, L each, then state_h, state_c) and
# `meta` float64 [6] (SEQUENCE_META; integers and float32 are exact in it).
# `unpack_sequences` (the learner's input transform, the tools) gives back
# sequence_signature's fields bit for bit. Measured in docs/performance.md.
SEQUENCE_STEP_FIELDS = ("action", "reward", "discount", "mask")
SEQUENCE_META = ("start_step", "actor", "slot", "epsilon", "version", "insert_time")
_SEQUENCE_DTYPES = {
    "action": "int32",
    "start_step": "int32",
    "actor": "int32",
    "slot": "int32",
    "epsilon": "float32",
    "version": "int64",
}


def sequence_stores_frames(config: ApexConfig, spec: EnvSpec) -> bool:
    """True if `config`'s R2D2 sequences store each observation once (the frame
    layout): replay.frame_storage is 'auto' and the observation is an image
    (two axes or more: a frame, or a stack of frames); otherwise the packed
    layout (sequence_signature), e.g. for vector observations."""
    mode = config.replay.frame_storage
    return mode == "auto" and len(tuple(spec.observation_shape)) >= 2


def frame_sequence_signature(
    spec: EnvSpec, length: int, lstm_size: int, period: int = 1, compression: str = "none"
) -> dict[str, tf.TensorSpec]:
    """Per-item signature of an R2D2 sequence of the frame layout: `obs_frames`
    [L, *obs] (references L consecutive steps of its slot's observation
    stream; compressed: [L / G] tf.string, G = frame_codec.sequence_block(L,
    P) observations per block), `floats` [4L + 2H] float32 and `meta` [6]
    float64 (see above)."""
    if compresses(compression):
        blocks = length // sequence_block(length, period, compression)
        obs = tf.TensorSpec([blocks], tf.string, name=f"frames:{compression}")
    else:
        obs = tf.TensorSpec((length, *spec.observation_shape), tf.as_dtype(spec.observation_dtype))
    width = len(SEQUENCE_STEP_FIELDS) * length + 2 * lstm_size
    return {
        "obs_frames": obs,
        "floats": tf.TensorSpec([width], tf.float32),
        "meta": tf.TensorSpec([len(SEQUENCE_META)], tf.float64),
    }


def unpack_sequences(data: dict, xp: Any = np, obs: tuple | None = None) -> dict:
    """sequence_signature's fields of sequences of the frame layout with a
    leading batch axis; other data as it is. `xp` is numpy (tools) or
    tensorflow (the learner's input transform; `obs` = ((L, *obs), dtype)
    when frames are compressed)."""
    if "floats" not in data:
        return data
    cast = (lambda x, t: x.astype(t)) if xp is np else (lambda x, t: tf.cast(x, t))
    floats, meta = data["floats"], data["meta"]
    frames = _frames(data["obs_frames"], xp, obs)
    length = int(frames.shape[1])
    hidden = (int(floats.shape[1]) - len(SEQUENCE_STEP_FIELDS) * length) // 2
    out = {"obs": frames}
    for i, name in enumerate(SEQUENCE_STEP_FIELDS):
        value = floats[:, i * length : (i + 1) * length]
        out[name] = cast(value, _SEQUENCE_DTYPES[name]) if name in _SEQUENCE_DTYPES else value
    base = len(SEQUENCE_STEP_FIELDS) * length
    out["state_h"] = floats[:, base : base + hidden]
    out["state_c"] = floats[:, base + hidden : base + 2 * hidden]
    for i, name in enumerate(SEQUENCE_META):
        value = meta[:, i]
        out[name] = cast(value, _SEQUENCE_DTYPES[name]) if name in _SEQUENCE_DTYPES else value
    return out


def make_rate_limiter(config: ApexConfig) -> reverb.rate_limiters.RateLimiter:
    r = config.replay
    return reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=float(r.samples_per_insert),
        min_size_to_sample=int(r.min_size),
        error_buffer=effective_error_buffer(r, config.learner.batch_size),
    )


def make_table(name: str, signature: dict[str, tf.TensorSpec], config: ApexConfig) -> reverb.Table:
    """One prioritized FIFO table `name` of items of `signature`, sized and rate
    limited by `config`'s replay section (an agent's builder makes its tables
    with it: apex.agents.AgentBuilder.make_tables)."""
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Prioritized(config.replay.priority_exponent),
        remover=reverb.selectors.Fifo(),
        max_size=int(config.replay.capacity),
        rate_limiter=make_rate_limiter(config),
        signature=signature,
    )
