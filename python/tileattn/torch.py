"""tileattn for PyTorch: the custom ops ``torch.ops.tileattn.attention`` and
``torch.ops.tileattn.varlen_attention``, with their backward ops.

Importing this module needs torch (``tileattn.attention`` imports it by itself when it first sees
a torch tensor). The ops are registered with ``torch.library.custom_op``, with fake (meta)
implementations and ``register_autograd``, so they train, run under ``torch.compile`` and pass
``torch.library.opcheck``; eager calls that autograd records skip them for one
``torch.autograd.Function`` with the same forward and backward (host time). For the backward
they save q, k, v, out and lse (never P): when autograd records a call the forward computes its
LSE too. The gradient of a returned lse
(``return_lse=True`` used in the loss) flows back as well. ``deterministic`` follows
``torch.use_deterministic_algorithms``.

Schemas::

    tileattn::attention(Tensor q, Tensor k, Tensor v, bool causal, float? scale,
                        int window_left, int window_right, float softcap, str kernel,
                        int num_splits, bool return_lse) -> (Tensor out, Tensor lse)
    tileattn::attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out,
                                 Tensor lse, Tensor? dlse, bool causal, float? scale,
                                 int window_left, int window_right, float softcap,
                                 bool deterministic) -> (Tensor dq, Tensor dk, Tensor dv)

lse is computed only when return_lse is true; otherwise it is an empty tensor. The varlen ops
take the index tensors and maxima after v (see ``tileattn.attention_varlen``).
"""

from typing import Optional

import torch

from . import _C, _api, _arrays

@torch.library.custom_op("tileattn::attention", mutates_args=())
def _attention_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: Optional[float],
    window_left: int,
    window_right: int,
    softcap: float,
    kernel: str,
    num_splits: int,
    return_lse: bool,
    deterministic: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    options = dict(
        causal=causal,
        scale=scale,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
        kernel=kernel,
        num_splits=num_splits,
    )
    out, lse = _forward_plain(q, k, v, options, return_lse)
    return out, lse if return_lse else q.new_empty((0,), dtype=torch.float32)


@_attention_op.register_fake
def _attention_fake(q, k, v, causal, scale, window_left, window_right, softcap, kernel, num_splits, return_lse,
                    deterministic=False):
    if q.dim() != 4:
        raise ValueError(f"q: rank {q.dim()} (shape {tuple(q.shape)}), expected {_api._LAYOUT_Q}")
    batch, seqlen_q, heads_q, head_dim = q.shape
    out = q.new_empty((batch, seqlen_q, heads_q, head_dim))
    lse_shape = (batch, heads_q, seqlen_q) if return_lse else (0,)
    return out, q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("tileattn::attention_backward", mutates_args=())
def _backward_op(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dlse: Optional[torch.Tensor],
    causal: bool,
    scale: Optional[float],
    window_left: int,
    window_right: int,
    softcap: float,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    options = dict(causal=causal, scale=scale, window_left=window_left, window_right=window_right, softcap=softcap)
    return _backward_plain(dout, q, k, v, out, lse, dlse, _NO_INDEX, -1, -1, options, deterministic, False)


@_backward_op.register_fake
def _backward_fake(dout, q, k, v, out, lse, dlse, causal, scale, window_left, window_right, softcap, deterministic):
    return _new_grads(q, k, v)


def _new_grads(q, k, v, zero=False):
    """dq, dk, dv: new contiguous tensors shaped like q, k, v (zeros when rows may stay unwritten)."""
    new = torch.zeros_like if zero else torch.empty_like
    return tuple(new(x, dtype=q.dtype, memory_format=torch.contiguous_format) for x in (q, k, v))


_NO_INDEX = (None, None, None, None)


def _backward_plain(dout, q, k, v, out, lse, dlse, index, max_q, max_k, options, deterministic, varlen):
    """The backward on plain torch tensors: gradients from torch.empty (zeros for varlen), the
    work on q's current stream."""
    if dout.is_cuda and (dout.stride(-1) != 1 or dout.data_ptr() % 16 or any(s % 8 for s in dout.stride()[:-1])):
        # e.g. the expanded gradient of out.sum(): the CUDA kernels read 16-byte-aligned rows of D
        dout = dout.contiguous()
    grads = _new_grads(q, k, v, zero=varlen)
    _C.backward(dout, q, k, v, out, lse, *grads, dlse, *index, max_q, max_k, varlen=varlen, **options,
                stream=current_stream(q), deterministic=deterministic)
    return grads


def _backward_ops(dout, q, k, v, out, lse, dlse, index, max_q, max_k, options, deterministic, varlen):
    """_backward_plain through the backward ops (torch.compile, compiled autograd, subclasses)."""
    o = options
    if varlen:
        return _varlen_backward_op(dout, q, k, v, out, lse, dlse, *index, max_q, max_k, o["causal"], o["scale"],
                                   o["window_left"], o["window_right"], o["softcap"], deterministic)
    return _backward_op(dout, q, k, v, out, lse, dlse, o["causal"], o["scale"], o["window_left"], o["window_right"],
                        o["softcap"], deterministic)


def _deterministic(flag):
    return bool(flag) or torch.are_deterministic_algorithms_enabled()


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, window_left, window_right, softcap, kernel, num_splits, return_lse = inputs[:11]
    out, lse = output
    if not return_lse:  # the op was called without its LSE: recompute it for the backward
        with torch.no_grad():
            _, lse = _attention_op(q, k, v, causal, scale, window_left, window_right, softcap, kernel, num_splits,
                                   True)
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.options = dict(causal=causal, scale=scale, window_left=window_left, window_right=window_right, softcap=softcap)
    ctx.lse_is_output = return_lse
    ctx.deterministic = bool(inputs[11]) if len(inputs) > 11 else False
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dlse = grad_lse if ctx.lse_is_output else None
    grads = _backward_ops(grad_out, q, k, v, out, lse, dlse, _NO_INDEX, -1, -1, ctx.options,
                          _deterministic(ctx.deterministic), False)
    return tuple(grads) + (None,) * 9


_attention_op.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """Eager training calls on plain tensors: the ops' forward and backward (the dense op, or the
    varlen op when an index tuple is given) as one autograd.Function, without the dispatcher's
    round trips (~150 us of host time a forward + backward through the custom ops against ~40 us,
    which short GPU calls would wait on). torch.compile and tensor subclasses keep the ops."""

    # forward takes ctx (no setup_context): Function.apply binds a setup_context form's arguments
    # through inspect.signature on every call, 106 -> 163 us of host time a forward + backward.
    @staticmethod
    def forward(ctx, q, k, v, index, max_q, max_k, options, return_lse, deterministic, check_indices):
        if index is None:
            out, lse = _forward_plain(q, k, v, options, True)
        else:
            out, lse = _varlen_plain(q, k, v, index, max_q, max_k, options, True, check_indices)
        ctx.save_for_backward(q, k, v, out, lse, *(index or ()))
        ctx.args = (index is not None, max_q, max_k, {n: options[n] for n in _BACKWARD_OPTIONS}, deterministic)
        ctx.lse_is_output = return_lse
        ctx.set_materialize_grads(False)
        if not return_lse:
            ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, *index = ctx.saved_tensors
        varlen, max_q, max_k, options, deterministic = ctx.args
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        dlse = grad_lse if ctx.lse_is_output else None
        # Compiled autograd traces the backward: the ops there.
        run = _backward_ops if torch.compiler.is_compiling() else _backward_plain
        grads = run(grad_out, q, k, v, out, lse, dlse, tuple(index) if varlen else _NO_INDEX, max_q, max_k, options,
                    _deterministic(deterministic), varlen)
        return tuple(grads) + (None,) * 7


_BACKWARD_OPTIONS = ("causal", "scale", "window_left", "window_right", "softcap")


def _eager_training(q, k, v):
    """Whether autograd records this eager call on plain CPU or CUDA tensors with no dispatch mode
    active (_EagerAttention takes it; the op stays visible to modes such as selective activation
    checkpointing and FLOP counters, and takes meta tensors to its fake kernel)."""
    return not _needs_op(q, k, v, grad=False) and _records_grad(q, k, v)


def _records_grad(q, k, v):
    """Whether autograd records this call (so the forward also keeps its LSE for the backward)."""
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def _needs_op(q, k, v, grad=True):
    """Whether the call must go through the dispatcher (or, with grad, autograd): under
    torch.compile, for tensor subclasses (fake tensors, ...) and meta tensors, under a dispatch
    mode (FLOP counters, selective activation checkpointing), and when autograd records it.
    Plain eager calls skip the op's dispatch overhead (tens of microseconds) and compute lse only
    when asked."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0:
        return True
    tensor = torch.Tensor
    if type(q) is not tensor or type(k) is not tensor or type(v) is not tensor or q.is_meta:
        return True
    return grad and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


_WORKING_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_torch_arrays(q, k, v):
    """_api._check_arrays for torch tensors, with plain tensors of a working dtype and rank 4
    answered without the general checks (which name the argument at fault)."""
    tensor = torch.Tensor
    if (type(q) is tensor and type(k) is tensor and type(v) is tensor and q.dtype in _WORKING_DTYPES
            and k.dtype in _WORKING_DTYPES and v.dtype in _WORKING_DTYPES and q.dim() == 4):
        return
    _api._check_arrays(q, k, v, _arrays.WORKING_DTYPES)


def current_stream(t):
    """The raw cudaStream_t (an int) torch is working on for t's device; 0 for a CPU tensor."""
    if not t.is_cuda:
        return 0
    return torch._C._cuda_getCurrentRawStream(t.get_device())


def _forward_plain(q, k, v, options, return_lse):
    """The forward on plain torch tensors (q, k and v checked): new outputs on q's device, the
    work on its current stream. This is the whole host path of an eager call."""
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if return_lse:
        batch, seqlen_q, heads_q, _ = q.shape
        lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    else:
        lse = None
    _C.forward(q, k, v, out, lse, **options, stream=current_stream(q))
    return out, lse


def _call_op(q, k, v, options, return_lse, deterministic=False):
    """q, k and v are checked torch tensors."""
    if not _needs_op(q, k, v):
        out, lse = _forward_plain(q, k, v, options, return_lse)
        return (out, lse) if return_lse else out
    if _eager_training(q, k, v):
        out, lse = _EagerAttention.apply(q, k, v, None, -1, -1, options, return_lse, bool(deterministic), False)
        return (out, lse) if return_lse else out
    want_lse = return_lse or _records_grad(q, k, v)
    out, lse = _attention_op(
        q,
        k,
        v,
        options["causal"],
        options["scale"],
        options["window_left"],
        options["window_right"],
        options["softcap"],
        options["kernel"],
        options["num_splits"],
        want_lse,
        bool(deterministic),
    )
    return (out, lse) if return_lse else out


@torch.library.custom_op("tileattn::varlen_attention", mutates_args=())
def _varlen_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: Optional[torch.Tensor],
    cu_seqlens_k: Optional[torch.Tensor],
    seqused_q: Optional[torch.Tensor],
    seqused_k: Optional[torch.Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool,
    scale: Optional[float],
    window_left: int,
    window_right: int,
    softcap: float,
    kernel: str,
    num_splits: int,
    return_lse: bool,
    deterministic: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    options = dict(causal=causal, scale=scale, window_left=window_left, window_right=window_right, softcap=softcap,
                   kernel=kernel, num_splits=num_splits)
    index = (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    out, lse = _varlen_plain(q, k, v, index, max_seqlen_q, max_seqlen_k, options, return_lse, False)
    return out, lse if return_lse else q.new_empty((0,), dtype=torch.float32)


@_varlen_op.register_fake
def _varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q, max_seqlen_k, causal,
                 scale, window_left, window_right, softcap, kernel, num_splits, return_lse, deterministic=False):
    from ._varlen import _varlen_shapes

    out_shape, lse_shape = _varlen_shapes(q, cu_seqlens_q)
    return q.new_empty(out_shape), q.new_empty(lse_shape if return_lse else (0,), dtype=torch.float32)


def _varlen_plain(q, k, v, index, max_q, max_k, options, return_lse, check_indices):
    """attention_varlen on plain torch tensors: outputs from torch.empty, q's current stream."""
    from ._varlen import _check_index, _varlen_shapes

    _api._check_arrays_any_rank(q, k, v)
    for name, x in zip(("cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k"), index):
        _check_index(x, name, "torch")
    out_shape, lse_shape = _varlen_shapes(q, index[0])
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device) if return_lse else None
    _C.forward_varlen(q, k, v, out, lse, *index, max_q, max_k, **options, stream=current_stream(q),
                      check_indices=check_indices)
    return out, lse


def _call_varlen_op(q, k, v, index, max_q, max_k, options, return_lse, check_indices, deterministic=False):
    if not _needs_op(q, k, v):
        out, lse = _varlen_plain(q, k, v, index, max_q, max_k, options, return_lse, bool(check_indices))
        return (out, lse) if return_lse else out
    if _eager_training(q, k, v):
        out, lse = _EagerAttention.apply(q, k, v, tuple(index), max_q, max_k, options, return_lse, bool(deterministic),
                                         bool(check_indices))
        return (out, lse) if return_lse else out
    out, lse = _varlen_op(q, k, v, *index, max_q, max_k, options["causal"], options["scale"],
                          options["window_left"], options["window_right"], options["softcap"], options["kernel"],
                          options["num_splits"], return_lse or _records_grad(q, k, v), bool(deterministic))
    return (out, lse) if return_lse else out


@torch.library.custom_op("tileattn::varlen_attention_backward", mutates_args=())
def _varlen_backward_op(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dlse: Optional[torch.Tensor],
    cu_seqlens_q: Optional[torch.Tensor],
    cu_seqlens_k: Optional[torch.Tensor],
    seqused_q: Optional[torch.Tensor],
    seqused_k: Optional[torch.Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool,
    scale: Optional[float],
    window_left: int,
    window_right: int,
    softcap: float,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    options = dict(causal=causal, scale=scale, window_left=window_left, window_right=window_right, softcap=softcap)
    index = (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    return _backward_plain(dout, q, k, v, out, lse, dlse, index, max_seqlen_q, max_seqlen_k, options, deterministic,
                           True)


@_varlen_backward_op.register_fake
def _varlen_backward_fake(dout, q, k, v, out, lse, dlse, *rest):
    return _new_grads(q, k, v, zero=True)


def _varlen_setup_context(ctx, inputs, output):
    q, k, v, *index = inputs[:7]
    max_q, max_k, causal, scale, window_left, window_right, softcap, kernel, num_splits, return_lse = inputs[7:17]
    out, lse = output
    if not return_lse:
        with torch.no_grad():
            _, lse = _varlen_op(*inputs[:16], True)
    ctx.save_for_backward(q, k, v, out, lse, *index)
    ctx.args = (max_q, max_k, dict(causal=causal, scale=scale, window_left=window_left, window_right=window_right,
                                   softcap=softcap))
    ctx.lse_is_output = return_lse
    ctx.deterministic = bool(inputs[17]) if len(inputs) > 17 else False
    ctx.set_materialize_grads(False)


def _varlen_backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, *index = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dlse = grad_lse if ctx.lse_is_output else None
    grads = _backward_ops(grad_out, q, k, v, out, lse, dlse, index, *ctx.args, _deterministic(ctx.deterministic), True)
    return tuple(grads) + (None,) * 15


_varlen_op.register_autograd(_varlen_backward, setup_context=_varlen_setup_context)


def _check_backward_arrays(dout, out, lse, dlse):
    for name, x in (("dout", dout), ("out", out), ("lse", lse), ("dlse", dlse)):
        if x is not None and not isinstance(x, torch.Tensor):
            raise _api.argument_error(TypeError, name, f"a {_arrays.type_name(x)}, but q is a torch.Tensor; pass "
                                      "arrays of one kind")


def _call_backward_op(dout, q, k, v, out, lse, dlse, options, deterministic):
    """tileattn.attention_backward for torch tensors (options checked)."""
    _api._check_arrays(q, k, v, _arrays.WORKING_DTYPES)
    _check_backward_arrays(dout, out, lse, dlse)
    deterministic = _deterministic(deterministic)
    if not _needs_op(q, k, v) and all(type(x) is torch.Tensor for x in (dout, out, lse)):
        return _backward_plain(dout, q, k, v, out, lse, dlse, _NO_INDEX, -1, -1, options, deterministic, False)
    if options.get("kernel", "auto") != "auto":
        raise _api.argument_error(ValueError, "kernel", f"{options['kernel']!r}: the torch op (torch.compile, "
                                  "tensor subclasses) takes only 'auto'")
    return _backward_ops(dout, q, k, v, out, lse, dlse, _NO_INDEX, -1, -1, options, deterministic, False)


def _call_varlen_backward_op(dout, q, k, v, out, lse, dlse, index, max_q, max_k, options, deterministic):
    from ._varlen import _check_index

    _api._check_arrays_any_rank(q, k, v)
    _check_backward_arrays(dout, out, lse, dlse)
    for name, x in zip(("cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k"), index):
        _check_index(x, name, "torch")
    deterministic = _deterministic(deterministic)
    if not _needs_op(q, k, v) and all(type(x) is torch.Tensor for x in (dout, out, lse)):
        return _backward_plain(dout, q, k, v, out, lse, dlse, index, max_q, max_k, options, deterministic, True)
    if options.get("kernel", "auto") != "auto":
        raise _api.argument_error(ValueError, "kernel", f"{options['kernel']!r}: the torch op (torch.compile, "
                                  "tensor subclasses) takes only 'auto'")
    return _backward_ops(dout, q, k, v, out, lse, dlse, index, max_q, max_k, options, deterministic, True)


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
    """:func:`tileattn.attention` for torch tensors, through ``torch.ops.tileattn.attention``.

    Arguments and results as in :func:`tileattn.attention`; q, k and v are torch tensors (CPU or
    CUDA; float32, float16, bfloat16), strided views included. The output is a new contiguous
    tensor; on CUDA the op runs on ``torch.cuda.current_stream()``.
    """
    options = _api._check_options(causal, scale, window, softcap, kernel, num_splits)
    _check_torch_arrays(q, k, v)
    return _call_op(q, k, v, options, return_lse, deterministic)


__all__ = ["attention"]
