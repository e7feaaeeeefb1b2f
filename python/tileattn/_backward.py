"""The backward pass: attention_backward, attention_varlen_backward, and their baselines
reference_backward (float64 oracle) and eager_backward."""

from . import _C, _arrays
from ._api import _check_arrays_any_rank, _check_options, argument_error
from ._varlen import _INDEX_NAMES, _check_index, _check_max

_NO_INDEX = (None, None, None, None)


def _check_bool(x, name):
    if not isinstance(x, bool) and type(x).__name__ != "bool_":
        raise argument_error(TypeError, name, f"expected a bool, got {_arrays.type_name(x)} {x!r}")
    return bool(x)


def _core_options(causal, scale, window, softcap):
    options = _check_options(causal, scale, window, softcap)
    options.pop("kernel"), options.pop("num_splits")
    return options


def _run(entry, dout, q, k, v, out, lse, dlse, index, max_q, max_k, options, varlen, grad_dtype=None,
         zero=False, check_indices=False):
    """Checks the arrays' kinds and dtypes, allocates dq, dk, dv like q, k, v in q's framework
    (zeros where rows may be left unwritten), runs the core entry on q's stream."""
    allowed = _arrays.REFERENCE_DTYPES if entry is _C.reference_backward else _arrays.WORKING_DTYPES
    kind = _check_arrays_any_rank(q, k, v, allowed)
    named = [("dout", dout), ("out", out), ("lse", lse), ("dlse", dlse)]
    for name, x in named:
        if x is None:
            continue
        if _arrays.kind_of(x, name) != kind:
            raise argument_error(
                TypeError, name, f"a {_arrays.type_name(x)}, but q is a {_arrays.type_name(q)}; pass arrays of one kind"
            )
        _arrays.check_dtype(x, kind, name, ("float32", "float64") if name.endswith("lse") else allowed)
    for name, x in zip(_INDEX_NAMES, index):
        _check_index(x, name, kind)
    outputs = _arrays.Outputs(q, kind)
    grads = [outputs.empty(x.shape, grad_dtype) for x in (q, k, v)]
    if zero:
        for g in grads:
            g[...] = 0
    with outputs:
        args = [outputs.core(x) for x in (dout, q, k, v, out, lse, *grads, dlse, *index)]
        entry(*args, max_q, max_k, varlen=varlen, **options, stream=outputs.stream(),
              u16_is_bf16=outputs.u16_is_bf16, check_indices=check_indices)
    return tuple(outputs.result(g) for g in grads)


def attention_backward(dout, q, k, v, out, lse, *, causal=False, scale=None, window=(-1, -1), softcap=0.0,
                       deterministic=False, dlse=None, kernel="auto"):
    """The gradients of :func:`tileattn.attention`: ``(dq, dk, dv)`` for the output gradient dout.

    Args:
        dout: the gradient of the loss with respect to ``out``, shaped like q.
        q, k, v: the forward's inputs (any array kind :func:`tileattn.attention` takes).
        out, lse: the forward's results for the same options (``attention(..., return_lse=True)``).
        causal, scale, window, softcap: as the forward was called.
        deterministic: the same bits on every run (a fixed order for every gradient sum).
        dlse: optional gradient with respect to ``lse`` (float32, shaped like it), for a loss
            that also uses the LSE (merging partial results does).
        kernel: ``"auto"`` (on Hopper the sm90 backward at head dims 64, 128 and 256; else
            the sm80 one),
            ``"sm80"``, or ``"sm90"``: the Hopper backward (head dims
            64, 128 and 256; ValueError naming what it does not take). Plain torch
            tensors and other array kinds only (the torch op that ``torch.compile`` traces takes
            ``"auto"``).

    Returns:
        ``(dq, dk, dv)`` shaped like q, k and v, in q's dtype, arrays of q's kind on q's device.
        GQA: dk and dv sum over the query heads that share a KV head. Nothing of size
        ``seqlen_q x seqlen_k`` is ever allocated.
    """
    options = _core_options(causal, scale, window, softcap)
    options["kernel"] = _check_options(causal, scale, window, softcap, kernel)["kernel"]
    deterministic = _check_bool(deterministic, "deterministic")
    if _arrays.kind_of(q, "q") == "torch":
        from . import torch as tileattn_torch

        return tileattn_torch._call_backward_op(dout, q, k, v, out, lse, dlse, options, deterministic)
    return _run(_C.backward, dout, q, k, v, out, lse, dlse, _NO_INDEX, -1, -1, dict(options, deterministic=deterministic),
                False)


def attention_varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q=None, cu_seqlens_k=None, *, max_seqlen_q=None,
                              max_seqlen_k=None, seqused_q=None, seqused_k=None, causal=False, scale=None,
                              window=(-1, -1), softcap=0.0, deterministic=False, dlse=None, check_indices=False,
                              kernel="auto"):
    """The gradients of :func:`tileattn.attention_varlen` (same index arrays and options):
    ``(dq, dk, dv)`` shaped like q, k, v; rows outside every sequence (or past seqused) get 0.
    ``kernel`` as for :func:`attention_backward` (``"auto"`` runs varlen batches on the Hopper
    backward at head dims 64, 128 and 256, but in deterministic mode at 128, else on the sm80
    one; ``"sm90"`` asks for the Hopper one)."""
    options = _core_options(causal, scale, window, softcap)
    options["kernel"] = _check_options(causal, scale, window, softcap, kernel)["kernel"]
    deterministic = _check_bool(deterministic, "deterministic")
    index = (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    max_q, max_k = _check_max(max_seqlen_q, "max_seqlen_q"), _check_max(max_seqlen_k, "max_seqlen_k")
    if _arrays.kind_of(q, "q") == "torch":
        from . import torch as tileattn_torch

        return tileattn_torch._call_varlen_backward_op(dout, q, k, v, out, lse, dlse, index, max_q, max_k, options,
                                                        deterministic)
    return _run(_C.backward, dout, q, k, v, out, lse, dlse, index, max_q, max_k,
                dict(options, deterministic=deterministic), True, zero=True, check_indices=bool(check_indices))


def reference_backward(dout, q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0, dlse=None,
                       cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, seqused_q=None,
                       seqused_k=None):
    """The float64 oracle of the backward (CPU arrays): ``(dq, dk, dv)`` as float64, from the
    formulas written out in double precision (the forward's O, LSE and P recomputed from q, k,
    v). With ``cu_seqlens_q``/``seqused_*``: the oracle of :func:`attention_varlen_backward`."""
    options = _core_options(causal, scale, window, softcap)
    index = (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    varlen = any(x is not None for x in index)
    max_q, max_k = _check_max(max_seqlen_q, "max_seqlen_q"), _check_max(max_seqlen_k, "max_seqlen_k")
    return _run(_C.reference_backward, dout, q, k, v, None, None, dlse, index, max_q, max_k, options, varlen,
                grad_dtype="float64", zero=varlen)


def eager_backward(dout, q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0, dlse=None):
    """The backward as a framework's eager autograd computes it, for your own comparisons (CPU
    arrays): S, P and dS materialized as ``[batch, heads, seqlen_q, seqlen_k]`` in the working
    dtype, every product accumulated in float32 and rounded to it. ``(dq, dk, dv)``."""
    options = _core_options(causal, scale, window, softcap)
    return _run(_C.eager_backward, dout, q, k, v, None, None, dlse, _NO_INDEX, -1, -1, options, False)
