"""Attention over a KV cache (decoding): flash_attn_with_kvcache, flash-attn 3's interface."""

import numbers

from . import _C, _arrays
from ._api import _check_options, _flash_attn_error, _flash_window, argument_error, not_supported
from ._varlen import _check_max

_INDEX = ("cache_seqlens", "cache_batch_idx", "cache_leftpad", "page_table", "cu_seqlens_q", "cu_seqlens_k_new")


def _full_int32(outputs, batch, value):
    """A [batch] int32 array of q's kind filled with value (cache_seqlens given as an int)."""
    x = outputs.empty((batch,), "int32")
    x[...] = value
    return x


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, check_indices=False, kernel="auto", *, block_table=None):
    """A drop-in for flash-attn 3's ``flash_attn_with_kvcache`` (a decoding step).

    q ``[batch, seqlen_q, heads_q, head_dim]`` (or packed ``[total_q, ...]`` with
    ``cu_seqlens_q``) attends to the cache: ``k_cache`` / ``v_cache`` ``[batch_cache, seqlen_cache,
    heads_kv, head_dim]``, or with ``page_table`` ``[batch, max_pages]`` (int32) the pages
    ``[num_pages, page_size, heads_kv, head_dim]`` (any page size). ``cache_seqlens`` (an int or
    ``[batch]`` int32) says how many keys each sequence has; ``k`` and ``v`` ``[batch, seqlen_new,
    heads_kv, head_dim]`` (packed with ``cu_seqlens_k_new``), when given, are written into the
    caches **in place** at those positions (rotary applied first with ``rotary_cos`` /
    ``rotary_sin`` ``[seqlen_ro, rotary_dim / 2]``; q is rotated too, at ``cache_seqlens + i``
    when causal or windowed, else at ``cache_seqlens``) and attended to in the same call.
    ``cache_batch_idx`` maps a sequence to its cache row, ``cache_leftpad`` is the position its
    keys start at. Masks align bottom-right. On the CPU every index value is checked before anything is
    written. Returns ``out``, or ``(out, softmax_lse)`` with ``return_softmax_lse=True``
    (``[batch, heads_q, seqlen_q]``). CPU arrays of any kind, and CUDA arrays on the current
    stream (index values are then trusted, not read back: no sync, so a step can be captured in
    a CUDA graph). ``check_indices=True`` (a tileattn extension) validates the index values on
    the device first, before anything is written (one sync): a bad value raises ``ValueError``
    naming the argument. ``kernel`` (a tileattn extension, as in :func:`tileattn.attention`):
    ``"sm90"`` also runs paged caches that auto selection sends to the sm80 kernel (page sizes
    that are not a multiple of 8, left padding) on Hopper's kernel. ``block_table`` is
    flash-attn 2's name for ``page_table`` (by keyword); flash-attn 2's positional order, which
    has ``rotary_cos`` where flash-attn 3 has ``qv``, is not taken.

    Raises:
        NotImplementedError: ``qv``, FP8 descales, ``rotary_seqlens``, ``attention_chunk``,
            ``scheduler_metadata`` or ``sm_margin`` given.
    """
    if qv is not None:  # flash-attn 2's order puts rotary_cos here
        raise NotImplementedError(f"qv={_arrays.type_name(qv)}: tileattn does not support it; pass qv=None "
                                  "(flash-attn 2's order has rotary_cos, rotary_sin here: pass them by keyword)")
    if block_table is not None:
        if page_table is not None:
            raise argument_error(TypeError, "block_table", "given with page_table (its flash-attn 3 name): pass one")
        page_table = block_table
    try:  # errors about the page table name it as the caller did
        for name, value, default in (("q_descale", q_descale, None), ("k_descale", k_descale, None),
                                     ("v_descale", v_descale, None), ("rotary_seqlens", rotary_seqlens, None),
                                     ("scheduler_metadata", scheduler_metadata, None),
                                     ("attention_chunk", attention_chunk, 0), ("sm_margin", sm_margin, 0)):
            not_supported(name, value, default)
        try:
            options = _check_options(causal, softmax_scale, _flash_window(causal, window_size), softcap, kernel,
                                     num_splits)
        except (TypeError, ValueError) as error:
            renamed = _flash_attn_error(error)
            if renamed is None:
                raise
            raise renamed from None
        kind = _arrays.kind_of(q, "q")
        arrays = {"k_cache": k_cache, "v_cache": v_cache, "k": k, "v": v, "rotary_cos": rotary_cos,
                  "rotary_sin": rotary_sin}
        for name, x in arrays.items():
            if x is not None and _arrays.kind_of(x, name) != kind:
                raise argument_error(TypeError, name, f"a {_arrays.type_name(x)}, but q is a {_arrays.type_name(q)}")
        max_q = _check_max(max_seqlen_q, "max_seqlen_q")
        outputs = _arrays.Outputs(q, kind)
        if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
            batch = len(cu_seqlens_q) - 1 if cu_seqlens_q is not None else int(q.shape[0])
            cache_seqlens = _full_int32(outputs, batch, int(cache_seqlens))
        index = dict(cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                     page_table=page_table, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new)
        for name, x in index.items():
            if x is not None:
                if _arrays.kind_of(x, name) != kind:
                    raise argument_error(TypeError, name,
                                         f"a {_arrays.type_name(x)}, but q is a {_arrays.type_name(q)}")
                _arrays.check_dtype(x, kind, name, ("int32",))
        for name in ("q", "k_cache", "v_cache"):
            _arrays.check_dtype(arrays.get(name, q), kind, name, _arrays.WORKING_DTYPES)
        packed = cu_seqlens_q is not None
        if len(q.shape) != (3 if packed else 4):
            raise argument_error(ValueError, "q", f"rank {len(q.shape)} (shape {tuple(q.shape)}), expected "
                                 + ("[total_q, heads, head_dim] with cu_seqlens_q" if packed
                                    else "[batch, seqlen_q, heads, head_dim]"))
        out = outputs.empty(tuple(q.shape))
        lse = None
        if return_softmax_lse:
            lse_shape = (q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[2], q.shape[1])
            lse = outputs.empty(lse_shape, "float32")
        with outputs:
            core = [outputs.core(x) for x in (q, k_cache, v_cache, out, lse, k, v, rotary_cos, rotary_sin)]
            core += [outputs.core(index[name]) for name in _INDEX]
            _C.forward_kvcache(*core, max_q, **options, rotary_interleaved=bool(rotary_interleaved),
                               stream=outputs.stream(), u16_is_bf16=outputs.u16_is_bf16,
                               check_indices=bool(check_indices))
        if return_softmax_lse:
            return outputs.result(out), outputs.result(lse)
        return outputs.result(out)
    except (TypeError, ValueError) as error:
        if block_table is None or getattr(error, "argument", None) != "page_table":
            raise
        raise argument_error(type(error), "block_table", str(error).removeprefix("page_table: ")) from None


__all__ = ["flash_attn_with_kvcache"]
