"""The public functions: attention, eager, reference, flash_attn_func."""

import math
import numbers
import operator

import numpy as np

from . import _C, _arrays
from ._arrays import argument_error

_LAYOUT_Q = "4 dims [batch, seqlen, heads, head_dim]"


_KERNELS = ("auto", "cpu", "sm80", "sm90")


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_options(causal, scale, window, softcap, kernel="auto", num_splits=0):
    """Type checks of the keyword options (values are checked by the core, which names them)."""
    # Options of the exact types the defaults have pass here without the general checks below
    # (a few microseconds a call; the rules are the same).
    if (type(causal) is bool and type(num_splits) is int and type(kernel) is str and type(softcap) is float
            and type(window) is tuple and len(window) == 2 and type(window[0]) is int and type(window[1]) is int
            and (scale is None or (type(scale) is float and abs(scale) <= _FLOAT32_MAX))
            and kernel in _KERNELS and -(2**31) <= num_splits < 2**31
            and -(2**63) <= window[0] < 2**63 and -(2**63) <= window[1] < 2**63):
        return dict(causal=causal, scale=scale, window_left=window[0], window_right=window[1], softcap=softcap,
                    kernel=kernel, num_splits=num_splits)
    if isinstance(num_splits, bool) or not isinstance(num_splits, numbers.Integral):
        raise argument_error(
            TypeError, "num_splits", f"expected an int, got {_arrays.type_name(num_splits)} {num_splits!r}"
        )
    if not -(2**31) <= num_splits < 2**31:
        raise argument_error(ValueError, "num_splits", f"{num_splits} does not fit a 32-bit integer")
    if not isinstance(kernel, str) or kernel not in _KERNELS:
        raise argument_error(
            ValueError, "kernel", f"{kernel!r}, expected one of {', '.join(map(repr, _KERNELS))}"
        )
    if not isinstance(causal, (bool, np.bool_, numbers.Integral)) or causal not in (0, 1):
        raise argument_error(
            TypeError, "causal", f"expected a bool, got {_arrays.type_name(causal)} {causal!r}"
        )
    if scale is not None and (not isinstance(scale, numbers.Real) or isinstance(scale, bool)):
        raise argument_error(
            TypeError,
            "scale",
            f"expected a float or None, got {_arrays.type_name(scale)} {scale!r}",
        )
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise argument_error(
            TypeError, "window", f"expected a pair (left, right) of ints, got {window!r}"
        )
    try:
        if any(isinstance(w, bool) for w in window):
            raise TypeError
        left, right = (operator.index(w) for w in window)
    except TypeError:
        raise argument_error(
            TypeError, "window", f"expected a pair (left, right) of ints, got {window!r}"
        ) from None
    for i, w in enumerate((left, right)):
        # The core takes int64; any window past every key means "unbounded" there.
        if not -(2**63) <= w < 2**63:
            raise argument_error(ValueError, f"window[{i}]", f"{w} does not fit a 64-bit integer")
    if not isinstance(softcap, numbers.Real) or isinstance(softcap, bool):
        raise argument_error(
            TypeError, "softcap", f"expected a float, got {_arrays.type_name(softcap)} {softcap!r}"
        )
    if scale is not None and math.isfinite(scale) and abs(scale) > _FLOAT32_MAX:
        raise argument_error(ValueError, "scale", f"{scale!r} overflows float32, the precision it is used in")
    return dict(
        causal=bool(causal),
        scale=None if scale is None else float(scale),
        window_left=left,
        window_right=right,
        softcap=float(softcap),
        kernel=kernel,
        num_splits=int(num_splits),
    )


def _check_arrays_any_rank(q, k, v, allowed_dtypes=_arrays.WORKING_DTYPES):
    """The kind of q after checking that k and v are of the same kind and every dtype allowed."""
    kind = _arrays.kind_of(q, "q")
    for name, x in (("k", k), ("v", v)):
        if _arrays.kind_of(x, name) != kind:
            raise argument_error(
                TypeError,
                name,
                f"a {_arrays.type_name(x)}, but q is a {_arrays.type_name(q)}; "
                "pass q, k and v as arrays of one kind",
            )
    for name, x in (("q", q), ("k", k), ("v", v)):
        _arrays.check_dtype(x, kind, name, allowed_dtypes)
    return kind


def _check_arrays(q, k, v, allowed_dtypes):
    """The kind of q ('numpy', 'torch', ...) after checking that k and v are of the same kind."""
    kind = _check_arrays_any_rank(q, k, v, allowed_dtypes)
    if len(q.shape) != 4:
        raise argument_error(
            ValueError, "q", f"rank {len(q.shape)} (shape {tuple(q.shape)}), expected {_LAYOUT_Q}"
        )
    return kind


def _run(entry, q, k, v, options, return_lse, out_dtype=None, lse_dtype="float32", kind=None):
    """Allocates out (and lse) in q's framework, runs the core entry on q's stream, returns them.
    kind: q's kind when the caller has checked q, k and v already."""
    if kind is None:
        allowed = _arrays.REFERENCE_DTYPES if entry is _C.reference else _arrays.WORKING_DTYPES
        kind = _check_arrays(q, k, v, allowed)
    batch, seqlen_q, heads_q, head_dim = (int(s) for s in q.shape)
    outputs = _arrays.Outputs(q, kind)
    out = outputs.empty((batch, seqlen_q, heads_q, head_dim), out_dtype)
    lse = outputs.empty((batch, heads_q, seqlen_q), lse_dtype) if return_lse else None
    with outputs:
        args = [outputs.core(x) for x in (q, k, v, out, lse)]
        entry(*args, **options, stream=outputs.stream(), u16_is_bf16=outputs.u16_is_bf16)
    if return_lse:
        return outputs.result(out), outputs.result(lse)
    return outputs.result(out)


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    scale=None,
    window=(-1, -1),
    softcap=0.0,
    return_lse=False,
    kernel="auto",
    num_splits=0,
    deterministic=False,
):
    """Exact attention, tiled with online softmax: ``softmax(scale * q k^T [masked]) v``.

    Args:
        q: ``[batch, seqlen_q, heads_q, head_dim]`` array: NumPy, PyTorch, CuPy, JAX or any
            array with ``__dlpack__``, on the CPU or a CUDA GPU. Strided views work as they are
            (e.g. a ``[B, H, L, D]`` tensor's ``.transpose(1, 2)``); nothing is copied.
        k, v: ``[batch, seqlen_k, heads_kv, head_dim]``, same kind, dtype and device as q.
            ``heads_q % heads_kv == 0`` (GQA/MQA: query head h reads kv head
            ``h // (heads_q // heads_kv)``).
        causal: query i sees keys ``j <= i + seqlen_k - seqlen_q`` (aligned bottom-right).
        scale: multiplies ``q k^T``; ``None`` means ``1 / sqrt(head_dim)``.
        window: ``(left, right)`` sliding window, ``-1`` = unbounded: query i sees keys
            ``i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right``.
            With ``causal=True`` right must be -1 or 0.
        softcap: when > 0, scores become ``softcap * tanh(scores / softcap)`` (Gemma 2, Grok).
        return_lse: also return the log-sum-exp of each row's scores.
        kernel: which implementation runs: ``"auto"`` (the fastest that supports the problem),
            or one forced by name for comparisons: ``"cpu"``, ``"sm80"``, ``"sm90"`` (an error
            says why it cannot run the problem).
        num_splits: split-KV for decoding (few query rows, long keys): the keys of each query
            tile are cut into this many splits whose partial results are merged exactly. ``0``
            (default) lets tileattn choose (more than one only when the tiles alone would leave
            the GPU's SMs or the CPU's threads idle); ``N`` forces N (at most 256).
        deterministic: torch tensors: the backward autograd runs for this call gives the same
            bits on every run (so does ``torch.use_deterministic_algorithms(True)``).

    Returns:
        ``out`` ``[batch, seqlen_q, heads_q, head_dim]`` in q's dtype, an array of q's kind on
        q's device; with ``return_lse=True`` the pair ``(out, lse)``, lse ``[batch, heads_q,
        seqlen_q]`` float32 (natural log). A row that sees no key gets zeros and lse ``-inf``.

    dtypes are float32, float16 and bfloat16 (NumPy bfloat16 is ``ml_dtypes.bfloat16``);
    accumulation is float32. On CUDA the work is queued on the caller's current stream
    (``torch.cuda.current_stream()``, ``cupy.cuda.get_current_stream()``) and not waited for.
    torch tensors go through the custom op ``torch.ops.tileattn.attention`` under
    ``torch.compile`` (see ``tileattn.torch``), and the calls train: autograd computes the
    gradients with :func:`tileattn.attention_backward` (q, k, v, out and lse saved, never P).

    Raises:
        TypeError: an argument is not an array, or of an unsupported dtype, or of the wrong type.
        ValueError: shapes or values that do not fit (the message names the argument).
        RuntimeError: a device failure (CUDA error, out of memory).
    """
    options = _check_options(causal, scale, window, softcap, kernel, num_splits)
    if _arrays.kind_of(q, "q") == "torch":
        from . import torch as tileattn_torch

        tileattn_torch._check_torch_arrays(q, k, v)
        return tileattn_torch._call_op(q, k, v, options, return_lse, deterministic)
    return _run(_C.forward, q, k, v, options, return_lse)


def eager(q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0, return_lse=False):
    """Standard attention as frameworks run it eagerly, for your own comparisons.

    Same arguments and results as :func:`attention`, but ``S = scale q k^T`` and ``P =
    softmax(S)`` are materialized as ``[batch, heads_q, seqlen_q, seqlen_k]`` arrays in the working
    dtype (softmax in float32), then ``out = P v``: the error a framework's plain attention makes
    in the same dtype. It needs O(seqlen_q * seqlen_k) memory. CPU and CUDA arrays.
    """
    options = _check_options(causal, scale, window, softcap)
    return _run(_C.eager, q, k, v, options, return_lse)


def reference(q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0, return_lse=False):
    """The float64 oracle: attention computed in double precision, for checking results.

    Same arguments as :func:`attention` (inputs float32, float16, bfloat16 or float64), CPU
    arrays only. Returns ``out`` as **float64** (and ``lse`` float64 with ``return_lse=True``)
    in q's framework, so the error of a result ``r`` is simply ``abs(r - out)``: converting back
    to the input dtype would hide the digits a comparison needs.
    """
    options = _check_options(causal, scale, window, softcap)
    return _run(
        _C.reference, q, k, v, options, return_lse, out_dtype="float64", lse_dtype="float64"
    )


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    qv=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    attention_chunk=0,
    num_splits=0,
    pack_gqa=None,
    sm_margin=0,
):
    """A drop-in for ``flash_attn.flash_attn_func`` for what tileattn supports.

    flash-attn 2's argument order (``dropout_p`` fourth), with flash-attn 3's further arguments
    taken by keyword: flash-attn 3 callers pass ``softmax_scale`` and ``causal`` by keyword.
    q ``[batch, seqlen_q, heads_q, head_dim]``, k and v ``[batch, seqlen_k, heads_kv, head_dim]``
    as in flash-attn (any array kind :func:`attention` takes). ``softmax_scale``, ``causal``,
    ``window_size`` and ``softcap`` mean what they mean there (with ``causal=True`` the window's
    right side is 0, as flash-attn sets it); ``deterministic`` makes the backward (torch
    autograd) deterministic; ``num_splits`` as in :func:`attention` (0: chosen per problem);
    ``pack_gqa`` is accepted (tileattn packs query heads on its own). Returns ``out``; with
    ``return_attn_probs=True`` flash-attn 2's ``(out, softmax_lse, None)``: the LSE ``[batch,
    heads_q, seqlen_q]`` float32 (natural log; -inf for a row that sees no key, where flash-attn
    writes +inf), and no probabilities. With torch tensors that require grad it trains.

    Raises:
        NotImplementedError: ``dropout_p != 0``, ``alibi_slopes``, ``qv``, FP8 descales,
            ``attention_chunk`` or ``sm_margin`` given.
    """
    refuse_fa2_extras(dropout_p, alibi_slopes)
    _refuse_fa3_extras(qv, q_descale, k_descale, v_descale, attention_chunk, sm_margin)
    try:
        result = attention(
            q, k, v, causal=causal, scale=softmax_scale, window=_flash_window(causal, window_size),
            softcap=softcap, deterministic=deterministic, return_lse=bool(return_attn_probs),
            num_splits=num_splits,
        )
    except (TypeError, ValueError) as error:
        renamed = _flash_attn_error(error)
        if renamed is None:
            raise
        raise renamed from None
    return (*result, None) if return_attn_probs else result


def _refuse_fa3_extras(qv, q_descale, k_descale, v_descale, attention_chunk, sm_margin):
    """What flash-attn 3's entries take and tileattn does not: NotImplementedError for each."""
    for name, value, default in (("qv", qv, None), ("q_descale", q_descale, None), ("k_descale", k_descale, None),
                                 ("v_descale", v_descale, None), ("attention_chunk", attention_chunk, 0),
                                 ("sm_margin", sm_margin, 0)):
        not_supported(name, value, default)


def not_supported(name, value, default):
    """NotImplementedError when an argument tileattn lacks is given a value other than its default."""
    given = value is not None if default is None else value != default
    if given:
        shown = _arrays.type_name(value) if default is None else repr(value)
        raise NotImplementedError(f"{name}={shown}: tileattn does not support it; pass {name}={default!r}")


_FLASH_ATTN_NAMES = {
    "scale": "softmax_scale",
    "window": "window_size",
    "window[0]": "window_size[0]",
    "window[1]": "window_size[1]",
}


def refuse_fa2_extras(dropout_p, alibi_slopes):
    """What flash-attn 2's entries take and tileattn does not: NotImplementedError for each."""
    if dropout_p is None or (isinstance(dropout_p, numbers.Real) and dropout_p != 0.0):
        raise NotImplementedError(
            f"dropout_p={dropout_p!r}: tileattn has no dropout; pass dropout_p=0.0 (inference). "
            "These entries take flash-attn 2's argument order (q, k, v, dropout_p, softmax_scale, "
            "causal, ...); with flash-attn 3's order, pass softmax_scale= and causal= by keyword"
        )
    if not isinstance(dropout_p, numbers.Real):
        raise argument_error(TypeError, "dropout_p", f"got a {_arrays.type_name(dropout_p)}, expected 0.0")
    if alibi_slopes is not None:
        raise NotImplementedError(
            "alibi_slopes: tileattn has no ALiBi bias; pass alibi_slopes=None"
        )


def _flash_window(causal, window_size):
    """flash-attn's window under causal: the right side is 0."""
    if causal and isinstance(window_size, (tuple, list)) and len(window_size) == 2:
        return (window_size[0], 0)
    return window_size


def _flash_attn_error(error):
    """error with the argument named as a flash-attn-style caller wrote it; None when it names
    no argument that was renamed (re-raise it as it is)."""
    argument = getattr(error, "argument", None)
    if argument not in _FLASH_ATTN_NAMES:
        return None
    return argument_error(type(error), _FLASH_ATTN_NAMES[argument], str(error).removeprefix(argument + ": "))
