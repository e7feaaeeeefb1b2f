"""flash-attn 2's packed entries: q, k and v (or k and v) stacked in one array along a dim of 3
(or 2), split into the unpacked call. torch, NumPy and CuPy split into views (nothing copied;
torch's autograd gives the packed tensor one gradient); JAX arrays slice into copies."""

from ._api import flash_attn_func, refuse_fa2_extras
from ._arrays import argument_error, kind_of
from ._varlen import flash_attn_varlen_func


def _unpack(x, name, dim, count, rank):
    """The `count` slices of x along `dim`, after checking x's rank and that dim's size."""
    kind = kind_of(x, name)
    shape = tuple(x.shape)
    if len(shape) != rank or shape[dim] != count:
        want = ["..."] * rank
        want[dim] = str(count)
        raise argument_error(ValueError, name, f"shape {list(shape)}: expected [{', '.join(want)}] "
                                               f"({rank} dims, {count} along dim {dim})")
    if kind == "torch":
        return x.unbind(dim)  # views whose backward is one stack, not `count` zero-filled sums
    index = (slice(None),) * dim
    return tuple(x[index + (i,)] for i in range(count))


def _call(packed, parts, dim, fn, *args, **kwargs):
    """fn(*args, **kwargs), an error about one of `parts` (the names of the slices of the array
    `packed`) re-raised naming `packed`, with the slice it was about."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as error:
        argument = getattr(error, "argument", None)
        if argument not in parts:
            raise
        message = str(error).removeprefix(argument + ": ")
        raise argument_error(type(error), packed,
                             f"{message} (of {argument}, its slice {parts.index(argument)} along dim {dim})") from None


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """A drop-in for ``flash_attn.flash_attn_qkvpacked_func``: ``qkv`` ``[batch, seqlen, 3, heads,
    head_dim]``, the rest as :func:`flash_attn_func`. Returns ``out`` ``[batch, seqlen, heads,
    head_dim]`` (with ``return_attn_probs=True`` ``(out, softmax_lse, None)``); with torch tensors
    that require grad it trains (the gradient lands in qkv)."""
    refuse_fa2_extras(dropout_p, alibi_slopes)
    q, k, v = _unpack(qkv, "qkv", 2, 3, 5)
    return _call("qkv", ("q", "k", "v"), 2, flash_attn_func, q, k, v, softmax_scale=softmax_scale, causal=causal,
                 window_size=window_size, softcap=softcap, deterministic=deterministic,
                 return_attn_probs=return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """A drop-in for ``flash_attn.flash_attn_kvpacked_func``: q ``[batch, seqlen_q, heads_q,
    head_dim]``, ``kv`` ``[batch, seqlen_k, 2, heads_kv, head_dim]``, the rest as
    :func:`flash_attn_func`."""
    refuse_fa2_extras(dropout_p, alibi_slopes)
    k, v = _unpack(kv, "kv", 2, 2, 5)
    return _call("kv", ("k", "v"), 2, flash_attn_func, q, k, v, softmax_scale=softmax_scale, causal=causal,
                 window_size=window_size, softcap=softcap, deterministic=deterministic,
                 return_attn_probs=return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """A drop-in for ``flash_attn.flash_attn_varlen_qkvpacked_func`` (flash-attn 2's argument
    order): packed ``qkv`` ``[total, 3, heads, head_dim]`` with int32 ``cu_seqlens`` ``[batch +
    1]``, as :func:`flash_attn_varlen_func` with the same lengths for queries and keys. Returns
    ``out`` ``[total, heads, head_dim]``; with ``return_attn_probs=True`` flash-attn 2's ``(out,
    softmax_lse, None)``, the LSE ``[heads, total]``."""
    refuse_fa2_extras(dropout_p, alibi_slopes)
    q, k, v = _unpack(qkv, "qkv", 1, 3, 4)
    result = _call("qkv", ("q", "k", "v"), 1, flash_attn_varlen_func, q, k, v, cu_seqlens, cu_seqlens,
                   max_seqlen, max_seqlen, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                   softcap=softcap, num_splits=0, deterministic=deterministic, return_attn_probs=return_attn_probs)
    return (*result, None) if return_attn_probs else result


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """A drop-in for ``flash_attn.flash_attn_varlen_kvpacked_func`` (flash-attn 2's argument
    order): q ``[total_q, heads_q, head_dim]``, ``kv`` ``[total_k, 2, heads_kv, head_dim]``, as
    :func:`flash_attn_varlen_func`. Returns ``out`` ``[total_q, heads_q, head_dim]``; with
    ``return_attn_probs=True`` flash-attn 2's ``(out, softmax_lse, None)``."""
    refuse_fa2_extras(dropout_p, alibi_slopes)
    k, v = _unpack(kv, "kv", 1, 2, 4)
    result = _call("kv", ("k", "v"), 1, flash_attn_varlen_func, q, k, v, cu_seqlens_q, cu_seqlens_k,
                   max_seqlen_q, max_seqlen_k, softmax_scale=softmax_scale, causal=causal,
                   window_size=window_size, softcap=softcap, num_splits=0, deterministic=deterministic,
                   return_attn_probs=return_attn_probs)
    return (*result, None) if return_attn_probs else result
