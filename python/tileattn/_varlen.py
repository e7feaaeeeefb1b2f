"""Variable-length batches and the merge of partial states: attention_varlen, reference_varlen,
flash_attn_varlen_func and flash_attn_combine (flash-attn 3's interface)."""

import numbers

import numpy as np

from . import _C, _arrays
from ._api import (_check_arrays_any_rank, _check_options, _flash_attn_error, _flash_window, _refuse_fa3_extras,
                   argument_error)

_INDEX_NAMES = ("cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k")


def _check_index(x, name, kind):
    if x is None:
        return
    if _arrays.kind_of(x, name) != kind:
        raise argument_error(
            TypeError, name, f"a {_arrays.type_name(x)}, but q is of another kind; pass arrays of one kind"
        )
    _arrays.check_dtype(x, kind, name, ("int32",))


def _check_max(x, name):
    if x is None:
        return -1
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise argument_error(TypeError, name, f"expected an int or None, got {_arrays.type_name(x)} {x!r}")
    return int(x)


def _varlen_shapes(q, cu_seqlens_q):
    """(out shape, lse shape) of a varlen call: packed [total_q, H, D] and [H, total_q], or dense."""
    if cu_seqlens_q is not None:
        if len(q.shape) != 3:
            raise argument_error(
                ValueError, "q", f"rank {len(q.shape)} (shape {tuple(q.shape)}), expected 3 dims "
                "[total_q, heads, head_dim] with cu_seqlens_q"
            )
        total, heads, dim = (int(s) for s in q.shape)
        return (total, heads, dim), (heads, total)
    if len(q.shape) != 4:
        raise argument_error(
            ValueError, "q", f"rank {len(q.shape)} (shape {tuple(q.shape)}), expected 4 dims "
            "[batch, seqlen, heads, head_dim] without cu_seqlens_q"
        )
    b, l, h, d = (int(s) for s in q.shape)
    return (b, l, h, d), (b, h, l)


def _run_varlen(entry, q, k, v, index, max_q, max_k, options, return_lse, check_indices, out_dtype=None,
                lse_dtype="float32"):
    allowed = _arrays.REFERENCE_DTYPES if entry is _C.reference_varlen else _arrays.WORKING_DTYPES
    kind = _check_arrays_any_rank(q, k, v, allowed)
    for name, x in zip(_INDEX_NAMES, index):
        _check_index(x, name, kind)
    out_shape, lse_shape = _varlen_shapes(q, index[0])
    outputs = _arrays.Outputs(q, kind)
    out = outputs.empty(out_shape, out_dtype)
    lse = outputs.empty(lse_shape, lse_dtype) if return_lse else None
    with outputs:
        args = [outputs.core(x) for x in (q, k, v, out, lse, *index)]
        extra = {} if entry is _C.reference_varlen else {"check_indices": check_indices}
        entry(*args, max_q, max_k, **options, stream=outputs.stream(), u16_is_bf16=outputs.u16_is_bf16, **extra)
    if return_lse:
        return outputs.result(out), outputs.result(lse)
    return outputs.result(out)


def attention_varlen(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, max_seqlen_q=None, max_seqlen_k=None,
                     seqused_q=None, seqused_k=None, causal=False, scale=None, window=(-1, -1), softcap=0.0,
                     return_lse=False, num_splits=0, kernel="auto", check_indices=False, deterministic=False):
    """:func:`tileattn.attention` for a batch of sequences of different lengths.

    Args:
        q: ``[total_q, heads_q, head_dim]``, the sequences' rows packed, with ``cu_seqlens_q``
            ``[batch + 1]`` int32 their prefix sums (``cu[0] = 0``, sequence b is rows
            ``cu[b] .. cu[b + 1] - 1``); or ``[batch, seqlen_q, heads_q, head_dim]`` without it.
        k, v: ``[total_k, heads_kv, head_dim]`` with ``cu_seqlens_k``, or dense.
        max_seqlen_q, max_seqlen_k: the longest sequence; needed with cu_seqlens on CUDA (the
            host cannot read device arrays), computed on the CPU when None.
        seqused_q, seqused_k: ``[batch]`` int32, the first ``seqused[b]`` rows of sequence b
            count; the rest may hold anything (NaN too) and are neither read nor written.
        check_indices: on CUDA, validate the index arrays on the device first (one sync); bad
            values then raise a ValueError naming the array and entry.
        The rest as :func:`tileattn.attention` (deterministic included); causal and windows align bottom-right per
        sequence, and a sequence of length 0 writes nothing.

    Returns:
        ``out`` shaped like q (rows past seqused_q left as allocated) and with ``return_lse``
        ``(out, lse)``, lse ``[heads_q, total_q]`` (dense: ``[batch, heads_q, seqlen_q]``).
    """
    options = _check_options(causal, scale, window, softcap, kernel, num_splits)
    index = (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    for name, x in zip(_INDEX_NAMES, index):  # a TypeError naming it before any op sees it
        if x is not None:
            _arrays.kind_of(x, name)
    max_q, max_k = _check_max(max_seqlen_q, "max_seqlen_q"), _check_max(max_seqlen_k, "max_seqlen_k")
    if _arrays.kind_of(q, "q") == "torch":
        from . import torch as tileattn_torch

        return tileattn_torch._call_varlen_op(q, k, v, index, max_q, max_k, options, return_lse, check_indices,
                                              deterministic)
    return _run_varlen(_C.forward_varlen, q, k, v, index, max_q, max_k, options, return_lse, bool(check_indices))


def reference_varlen(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, max_seqlen_q=None, max_seqlen_k=None,
                     seqused_q=None, seqused_k=None, causal=False, scale=None, window=(-1, -1), softcap=0.0,
                     return_lse=False):
    """The float64 oracle of :func:`attention_varlen` (CPU arrays): float64 results, each
    sequence computed on its own."""
    options = _check_options(causal, scale, window, softcap)
    options.pop("num_splits"), options.pop("kernel")
    index = (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    max_q, max_k = _check_max(max_seqlen_q, "max_seqlen_q"), _check_max(max_seqlen_k, "max_seqlen_k")
    return _run_varlen(_C.reference_varlen, q, k, v, index, max_q, max_k, options, return_lse, False,
                       out_dtype="float64", lse_dtype="float64")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                           return_attn_probs=False):
    """A drop-in for flash-attn 3's ``flash_attn_varlen_func`` (``flash_attn_interface``).

    Packed q ``[total_q, Hq, D]``, k and v ``[total_k, Hkv, D]`` with int32 ``cu_seqlens_q/k``
    ``[batch + 1]`` (any array kind :func:`tileattn.attention` takes), the maxima, optional
    ``seqused_q/k``; ``softmax_scale``, ``causal``, ``window_size``, ``softcap`` and
    ``num_splits`` (0: chosen per problem) as there. ``pack_gqa`` is accepted (tileattn packs
    query heads on its own); ``deterministic`` makes the backward deterministic. Returns
    ``out``, or ``(out, softmax_lse)`` with ``return_attn_probs=True`` (lse ``[Hq, total_q]``).

    Raises:
        NotImplementedError: ``qv``, FP8 descales, ``attention_chunk`` or ``sm_margin`` given.
    """
    _refuse_fa3_extras(qv, q_descale, k_descale, v_descale, attention_chunk, sm_margin)
    try:
        return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                                max_seqlen_k=max_seqlen_k, seqused_q=seqused_q, seqused_k=seqused_k, causal=causal,
                                scale=softmax_scale, window=_flash_window(causal, window_size), softcap=softcap,
                                return_lse=bool(return_attn_probs), num_splits=num_splits,
                                deterministic=deterministic)
    except (TypeError, ValueError) as error:
        renamed = _flash_attn_error(error)
        if renamed is None:
            raise
        raise renamed from None


def _swap_last(x, kind):
    """x with its last two dims swapped, a view where the framework makes one."""
    if kind == "numpy":
        return np.swapaxes(x, -1, -2)
    if kind == "torch":
        return x.transpose(-1, -2)
    if kind == "cupy":
        import cupy

        return cupy.swapaxes(x, -1, -2)
    return x.__array_namespace__().permute_dims(x, (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """flash-attn 3's ``flash_attn_combine``: merges split-KV partial states exactly.

    Args:
        out_partial: ``[splits, batch, seqlen, heads, head_dim]`` float32, each split's output
            normalized by its own softmax sum.
        lse_partial: ``[splits, batch, seqlen, heads]`` float32 (flash-attn's layout: a
            ``[splits, batch, heads, seqlen]`` array's ``transpose(-1, -2)`` view, or any
            strides), natural log.
        out: where to write (``[batch, seqlen, heads, head_dim]``), or None for a new array.
        out_dtype: the new out's dtype (default float32): float32, float16, bfloat16.

    Returns:
        ``(out, lse)``: ``lse = log(sum_s exp(lse_s))`` as ``[batch, seqlen, heads]`` (a view of
        ``[batch, heads, seqlen]`` storage), ``out = sum_s exp(lse_s - lse) out_s``. A split
        whose LSE is -inf contributes nothing, whatever its output holds; a row with no split
        left gets 0 and -inf.
    """
    kind = _arrays.kind_of(out_partial, "out_partial")
    if _arrays.kind_of(lse_partial, "lse_partial") != kind:
        raise argument_error(TypeError, "lse_partial", "is of another array kind than out_partial")
    for name, x, n in (("out_partial", out_partial, 5), ("lse_partial", lse_partial, 4)):
        _arrays.check_dtype(x, kind, name, ("float32",))
        if len(x.shape) != n:
            raise argument_error(ValueError, name, f"rank {len(x.shape)} (shape {tuple(x.shape)}), expected {n} dims")
    S, B, L, H, D = (int(s) for s in out_partial.shape)
    outputs = _arrays.Outputs(out_partial, kind)
    if out is None:
        name = "float32" if out_dtype is None else _arrays.dtype_name_of(out_dtype)
        if name not in _arrays.WORKING_DTYPES:
            raise argument_error(TypeError, "out_dtype", f"{out_dtype!r}, expected float32, float16 or bfloat16")
        out = outputs.empty((B, L, H, D), name)
    lse = outputs.empty((B, H, L), "float32")
    with outputs:
        args = [outputs.core(x) for x in (out_partial, _swap_last(lse_partial, kind), out, lse)]
        _C.combine(*args, stream=outputs.stream(), u16_is_bf16=outputs.u16_is_bf16)
    return outputs.result(out), _swap_last(outputs.result(lse), kind)
