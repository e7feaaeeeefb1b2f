"""JAX: differentiable attention, usable under ``jax.jit`` and ``jax.grad``.

    import tileattn.jax as ta
    out = ta.attention(q, k, v, causal=True)          # [batch, seqlen, heads, head_dim]
    dq, dk, dv = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

A ``jax.custom_vjp``: the forward keeps ``out`` and the LSE (never P) and the backward runs
:func:`tileattn.attention_backward`. Both run through ``jax.pure_callback`` on host arrays, so
traced code (jit, grad, vmap) works on any backend, and on a GPU backend the arrays travel
through the host (the CPU kernels run). Called eagerly outside a trace, :func:`tileattn.attention`
itself takes JAX arrays in place on either device (DLPack).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import tileattn


def _host(x):
    return np.asarray(x)


def _forward_callback(q, k, v, options):
    out, lse = tileattn.attention(_host(q), _host(k), _host(v), return_lse=True, **options)
    return out, lse


def _forward(q, k, v, options):
    batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    shapes = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((batch, heads_q, seqlen_q), jnp.float32))
    return jax.pure_callback(functools.partial(_forward_callback, options=options), shapes, q, k, v,
                             vmap_method="sequential")


def _backward_callback(dout, q, k, v, out, lse, options):
    return tileattn.attention_backward(*(_host(x) for x in (dout, q, k, v, out, lse)), **options)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _attention(q, k, v, causal, scale, window, softcap):
    return _forward(q, k, v, dict(causal=causal, scale=scale, window=window, softcap=softcap))[0]


def _attention_fwd(q, k, v, causal, scale, window, softcap):
    out, lse = _forward(q, k, v, dict(causal=causal, scale=scale, window=window, softcap=softcap))
    return out, (q, k, v, out, lse)


def _attention_bwd(causal, scale, window, softcap, saved, dout):
    q, k, v, out, lse = saved
    options = dict(causal=causal, scale=scale, window=window, softcap=softcap)
    shapes = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v))
    return jax.pure_callback(functools.partial(_backward_callback, options=options), shapes, dout.astype(q.dtype),
                             q, k, v, out, lse, vmap_method="sequential")


_attention.defvjp(_attention_fwd, _attention_bwd)


def _check_shapes(q, k, v):
    """What the shapes tell, checked at trace time (values and the rest: in the callback)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"{name}: rank {x.ndim}, expected 4 ([batch, seqlen, heads, head_dim])")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v: shape {tuple(v.shape)} differs from k's {tuple(k.shape)}")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"k: shape {tuple(k.shape)} does not match q's {tuple(q.shape)} in batch and head_dim")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"k: {k.shape[2]} heads do not divide q's {q.shape[2]}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"k, v: dtypes {k.dtype}, {v.dtype} differ from q's {q.dtype}")


def attention(q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0):
    """:func:`tileattn.attention` for JAX arrays ``[batch, seqlen, heads, head_dim]`` (GQA: fewer
    KV heads), differentiable in q, k and v; fp32, fp16 and bf16. Shapes are checked at trace
    time; anything else :func:`tileattn.attention` rejects raises from the callback."""
    window = tuple(int(w) for w in window)
    if len(window) != 2:
        raise ValueError(f"window: expected (left, right), got {window!r}")
    _check_shapes(q, k, v)
    return _attention(q, k, v, bool(causal), None if scale is None else float(scale), window, float(softcap))
