"""Attention in float64 NumPy, written here from the definition (independent of the library).

Layout [batch, seqlen, heads, head_dim]; masks aligned bottom-right: query i sees key j when
i + Lk - Lq - left <= j <= i + Lk - Lq + right (causal: right = 0; -1 = unbounded). A row that
sees no key gives out 0 and lse -inf.
"""

import numpy as np


def attention(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0):
    """(out [B, Lq, Hq, D], lse [B, Hq, Lq]) in float64."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    _, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    k = np.repeat(k, group, axis=2)  # query head h reads kv head h // group
    v = np.repeat(v, group, axis=2)
    scale = 1.0 / np.sqrt(head_dim) if scale is None else scale

    s = np.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)

    left, right = window
    if causal:
        right = 0
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    diagonal = i + seqlen_k - seqlen_q
    visible = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if right >= 0:
        visible &= j <= diagonal + right
    if left >= 0:
        visible &= j >= diagonal - left
    s = np.where(visible, s, -np.inf)

    m = s.max(axis=-1, keepdims=True) if seqlen_k else np.full(s.shape[:-1] + (1,), -np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    seen = l > 0
    p = p / np.where(seen, l, 1.0)
    out = np.einsum("bhij,bjhd->bihd", p, v)
    lse = np.where(seen, np.log(np.where(seen, l, 1.0)) + m, -np.inf)[..., 0]
    return out, lse


def rounding_atol(ref, dtype):
    """Twice the error of rounding values of ref's size to dtype (FlashAttention's test rule)."""
    x = np.asarray(ref, dtype=np.float64)
    rounded = (x + 0.3).astype(dtype).astype(np.float64) - 0.3
    return 2.0 * float(np.max(np.abs(rounded - x), initial=0.0))
