"""TensorFlow's private symbols apex touches (tensorflow-cpu 2.8.4): the eager
context's switch that stops a per-call leak of tf.function calls."""

from __future__ import annotations

from apex.compat.pins import TF_PIN, CompatError, require

# TF 2.8's eager runtime gives each tf.function call a rendezvous of its own and
# never frees it: ~400 B per call, forever (tensorflow/tensorflow#50765; fixed in
# TF 2.12). A learner calls its SGD function ~50 times a second for days. The
# runtime can instead hand every call one shared rendezvous, a switch TF 2.8
# keeps in C++ (EagerContext::SetReuseRendezvousForFunctions, no Python API).
_REUSE_RENDEZVOUS = "_ZN10tensorflow12EagerContext30SetReuseRendezvousForFunctionsEb"
_rendezvous_shared: bool | None = None


def share_function_rendezvous() -> bool:
    """Stop TF 2.8's per-call leak of tf.function calls in this process; True when done.

    Call it before the process's first tf.function call (a function's kernel
    keeps the rendezvous it was made with). It does nothing (False) where it is
    unsafe or not needed: a TensorFlow other than 2.8, TFRT, or any GPU/TPU
    visible. A shared rendezvous is only a hazard for functions that send
    tensors between devices (two concurrent calls could swap them); on a
    CPU-only process every function runs on one device and sends nothing.
    Idempotent.
    """
    global _rendezvous_shared
    if _rendezvous_shared is not None:
        return _rendezvous_shared
    _rendezvous_shared = False
    import ctypes

    import tensorflow as tf
    from tensorflow.python.eager import context

    if not tf.__version__.startswith("2.8."):
        return False
    if any(d.device_type != "CPU" for d in tf.config.list_physical_devices()):
        return False
    ctx = context.context()
    if getattr(ctx, "_use_tfrt", False):
        return False
    ctx.ensure_initialized()
    capsule = require(ctx, "_handle", "tf context._handle", TF_PIN)
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    pointer = get_pointer(capsule, get_name(capsule))
    library = ctypes.CDLL(_tf_internal_library())
    setter = require(
        library, _REUSE_RENDEZVOUS, "EagerContext::SetReuseRendezvousForFunctions", TF_PIN
    )
    setter.argtypes = [ctypes.c_void_p, ctypes.c_bool]
    setter.restype = None
    # TFE_Context* is the EagerContext* (its first base) in TF 2.8's eager runtime.
    setter(pointer, True)
    _rendezvous_shared = True
    return True


def _tf_internal_library() -> str:
    import os

    import tensorflow as tf

    return os.path.join(os.path.dirname(tf.__file__), "python", "_pywrap_tensorflow_internal.so")


def check_symbols() -> None:
    """Each symbol above exists in the installed TensorFlow (tests/test_compat.py)."""
    import ctypes

    from tensorflow.python.eager import context

    if not isinstance(getattr(context.Context, "_handle", None), property):
        raise CompatError("tf context._handle", TF_PIN)
    require(
        ctypes.CDLL(_tf_internal_library()),
        _REUSE_RENDEZVOUS,
        "EagerContext::SetReuseRendezvousForFunctions",
        TF_PIN,
    )
