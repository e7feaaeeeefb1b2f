"""tileattn for PyTorch: the custom op ``torch.ops.tileattn.attention``.

Importing this module needs torch (``tileattn.attention`` imports it by itself when it first sees
a torch tensor). The op is registered with ``torch.library.custom_op``, with a fake (meta)
implementation, so it runs under ``torch.compile`` and passes ``torch.library.opcheck``.

Gradients: tileattn has no backward pass yet. The forward runs on tensors that require grad, but
computing a gradient through it raises ``NotImplementedError``, when the backward actually runs
(a compiled graph that only *could* need a gradient still compiles and runs forward).

Schema::

    tileattn::attention(Tensor q, Tensor k, Tensor v, bool causal, float? scale,
                        int window_left, int window_right, float softcap, str kernel,
                        int num_splits, bool return_lse) -> (Tensor out, Tensor lse)

lse is computed only when return_lse is true; otherwise it is an empty tensor.
"""

from typing import Optional

import torch

from . import _C, _api, _arrays

NO_BACKWARD_MESSAGE = (
    "tileattn has no backward yet: its attention is forward-only. Run it under torch.no_grad() or "
    "torch.inference_mode(), or train with an attention that has a backward "
    "(torch.nn.functional.scaled_dot_product_attention)"
)


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
def _attention_fake(q, k, v, causal, scale, window_left, window_right, softcap, kernel, num_splits, return_lse):
    if q.dim() != 4:
        raise ValueError(f"q: rank {q.dim()} (shape {tuple(q.shape)}), expected {_api._LAYOUT_Q}")
    batch, seqlen_q, heads_q, head_dim = q.shape
    out = q.new_empty((batch, seqlen_q, heads_q, head_dim))
    lse_shape = (batch, heads_q, seqlen_q) if return_lse else (0,)
    return out, q.new_empty(lse_shape, dtype=torch.float32)


# The backward is an op of its own that raises when it runs: raising in the autograd formula
# itself would fail torch.compile's tracing of every graph whose inputs require grad, including
# inference graphs that never call backward. It takes the output's gradient, so that a compiled
# graph cannot schedule it in the forward pass.
@torch.library.custom_op("tileattn::attention_backward_unavailable", mutates_args=())
def _backward_op(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    raise NotImplementedError(NO_BACKWARD_MESSAGE)


@_backward_op.register_fake
def _backward_fake(grad_out, q, k, v):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3])


def _backward(ctx, grad_out, grad_lse):
    grad_q, grad_k, grad_v = _backward_op(grad_out, *ctx.saved_tensors)
    return grad_q, grad_k, grad_v, None, None, None, None, None, None, None, None


_attention_op.register_autograd(_backward, setup_context=_setup_context)


def _needs_op(q, k, v):
    """Whether the call must go through the dispatcher: under torch.compile, when autograd
    records it, or for tensor subclasses (fake, meta, ...). Plain eager calls skip the op's
    dispatch overhead (tens of microseconds) and compute lse only when asked."""
    if torch.compiler.is_compiling():
        return True
    tensors = (q, k, v)
    if any(type(t) is not torch.Tensor for t in tensors):
        return True
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def current_stream(t):
    """The raw cudaStream_t (an int) torch is working on for t's device; 0 for a CPU tensor."""
    if not t.is_cuda:
        return 0
    return torch._C._cuda_getCurrentRawStream(t.get_device())


def _forward_plain(q, k, v, options, return_lse):
    """The forward on plain torch tensors (q, k and v checked): outputs from torch.empty on q's
    device, the work on its current stream. This is the whole host path of an eager call."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device) if return_lse else None
    _C.forward(q, k, v, out, lse, **options, stream=current_stream(q))
    return out, lse


def _call_op(q, k, v, options, return_lse):
    """q, k and v are checked torch tensors."""
    if not _needs_op(q, k, v):
        out, lse = _forward_plain(q, k, v, options, return_lse)
        return (out, lse) if return_lse else out
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
        return_lse,
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
) -> tuple[torch.Tensor, torch.Tensor]:
    options = dict(causal=causal, scale=scale, window_left=window_left, window_right=window_right, softcap=softcap,
                   kernel=kernel, num_splits=num_splits)
    index = (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    out, lse = _varlen_plain(q, k, v, index, max_seqlen_q, max_seqlen_k, options, return_lse, False)
    return out, lse if return_lse else q.new_empty((0,), dtype=torch.float32)


@_varlen_op.register_fake
def _varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q, max_seqlen_k, causal,
                 scale, window_left, window_right, softcap, kernel, num_splits, return_lse):
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


def _call_varlen_op(q, k, v, index, max_q, max_k, options, return_lse, check_indices):
    if not _needs_op(q, k, v):
        out, lse = _varlen_plain(q, k, v, index, max_q, max_k, options, return_lse, bool(check_indices))
        return (out, lse) if return_lse else out
    out, lse = _varlen_op(q, k, v, *index, max_q, max_k, options["causal"], options["scale"],
                          options["window_left"], options["window_right"], options["softcap"], options["kernel"],
                          options["num_splits"], return_lse)
    return (out, lse) if return_lse else out


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
):
    """:func:`tileattn.attention` for torch tensors, through ``torch.ops.tileattn.attention``.

    Arguments and results as in :func:`tileattn.attention`; q, k and v are torch tensors (CPU or
    CUDA; float32, float16, bfloat16), strided views included. The output is a new contiguous
    tensor; on CUDA the op runs on ``torch.cuda.current_stream()``.
    """
    options = _api._check_options(causal, scale, window, softcap, kernel, num_splits)
    _api._check_arrays(q, k, v, _arrays.WORKING_DTYPES)
    return _call_op(q, k, v, options, return_lse)


__all__ = ["attention", "NO_BACKWARD_MESSAGE"]
