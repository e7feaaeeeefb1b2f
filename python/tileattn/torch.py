"""tileattn for PyTorch: the custom op ``torch.ops.tileattn.attention``.

Importing this module needs torch (``tileattn.attention`` imports it by itself when it first sees
a torch tensor). The op is registered with ``torch.library.custom_op``, with a fake (meta)
implementation, so it runs under ``torch.compile`` and passes ``torch.library.opcheck``.

Gradients: tileattn has no backward pass yet. The forward runs on tensors that require grad, but
computing a gradient through it raises ``NotImplementedError``, when the backward actually runs
(a compiled graph that only *could* need a gradient still compiles and runs forward).

Schema::

    tileattn::attention(Tensor q, Tensor k, Tensor v, bool causal, float? scale,
                        int window_left, int window_right, float softcap) -> (Tensor out, Tensor lse)
"""

from typing import Optional

import torch

from . import _C, _api

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
) -> tuple[torch.Tensor, torch.Tensor]:
    options = dict(
        causal=causal,
        scale=scale,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
    )
    return _api._run(_C.forward, q, k, v, options, return_lse=True)


@_attention_op.register_fake
def _attention_fake(q, k, v, causal, scale, window_left, window_right, softcap):
    if q.dim() != 4:
        raise ValueError(f"q: rank {q.dim()} (shape {tuple(q.shape)}), expected {_api._LAYOUT_Q}")
    batch, seqlen_q, heads_q, head_dim = q.shape
    out = q.new_empty((batch, seqlen_q, heads_q, head_dim))
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse


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
    return grad_q, grad_k, grad_v, None, None, None, None, None


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


def _call_op(q, k, v, options, return_lse, checked=False):
    if not _needs_op(q, k, v):
        kind = "torch" if checked else None
        return _api._run(_C.forward, q, k, v, options, return_lse, kind=kind)
    out, lse = _attention_op(
        q,
        k,
        v,
        options["causal"],
        options["scale"],
        options["window_left"],
        options["window_right"],
        options["softcap"],
    )
    return (out, lse) if return_lse else out


def attention(q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0, return_lse=False):
    """:func:`tileattn.attention` for torch tensors, through ``torch.ops.tileattn.attention``.

    Arguments and results as in :func:`tileattn.attention`; q, k and v are torch tensors (CPU or
    CUDA; float32, float16, bfloat16), strided views included. The output is a new contiguous
    tensor; on CUDA the op runs on ``torch.cuda.current_stream()``.
    """
    options = _api._check_options(causal, scale, window, softcap)
    return _call_op(q, k, v, options, return_lse)


__all__ = ["attention", "NO_BACKWARD_MESSAGE"]
