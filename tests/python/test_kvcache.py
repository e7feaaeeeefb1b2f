"""flash_attn_with_kvcache on CPU arrays: contiguous and paged caches, in-place append with and
without rotary, against the float64 oracle on the keys gathered from the updated cache."""

import numpy as np
import pytest

import tileattn

try:
    import ml_dtypes

    BF16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover
    BF16 = None


def rotate(x, cos, sin, pos, interleaved):
    """Rotary of x [..., D] at positions pos (broadcast over x's leading dims), float64."""
    x = x.astype(np.float64).copy()
    half = cos.shape[1]
    c, s = cos[pos].astype(np.float64), sin[pos].astype(np.float64)
    c, s = c[..., None, :], s[..., None, :]  # over heads
    if interleaved:
        a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, b * c + a * s
    return x


def run_case(dtype, page_size, rotary, interleaved=True, causal=True, seed=0):
    rng = np.random.default_rng(seed)
    B, Lq, Lnew, Hq, Hkv, D, cap = 3, 2, 2, 4, 2, 32, 48
    seqlens = np.array([5, 0, 40], np.int32)
    q = rng.standard_normal((B, Lq, Hq, D)).astype(dtype)
    k = rng.standard_normal((B, Lnew, Hkv, D)).astype(dtype)
    v = rng.standard_normal((B, Lnew, Hkv, D)).astype(dtype)
    if page_size:
        max_pages = -(-cap // page_size)
        order = rng.permutation(B * max_pages + 2).astype(np.int32)
        table = order[:B * max_pages].reshape(B, max_pages)
        kc = rng.standard_normal((len(order), page_size, Hkv, D)).astype(dtype)
        gather = lambda c, b, n: np.concatenate([c[table[b, j]] for j in range(max_pages)])[:n]
    else:
        table = None
        kc = rng.standard_normal((B, cap, Hkv, D)).astype(dtype)
        gather = lambda c, b, n: c[b, :n]
    vc = rng.standard_normal(kc.shape).astype(dtype)
    cos = sin = None
    if rotary:
        theta = np.arange(cap + Lq)[:, None] * 10000.0 ** (-np.arange(8) / 8)
        cos, sin = np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)
    k_before = kc.copy()
    out, lse = tileattn.flash_attn_with_kvcache(q, kc, vc, k, v, rotary_cos=cos, rotary_sin=sin,
                                                cache_seqlens=seqlens, page_table=table, causal=causal,
                                                rotary_interleaved=interleaved, return_softmax_lse=True)
    assert out.dtype == q.dtype and out.shape == q.shape and lse.shape == (B, Hq, Lq)
    changed = 0
    for b in range(B):
        n = seqlens[b] + Lnew
        keys, vals = gather(kc, b, n), gather(vc, b, n)
        pos = seqlens[b] + np.arange(Lnew)
        k_rot = rotate(k[b], cos, sin, pos, interleaved).astype(dtype) if rotary else k[b]
        np.testing.assert_array_equal(keys[seqlens[b]:].view(np.uint8), k_rot.view(np.uint8))
        np.testing.assert_array_equal(vals[seqlens[b]:].view(np.uint8), v[b].view(np.uint8))
        np.testing.assert_array_equal(keys[:seqlens[b]].view(np.uint8), gather(k_before, b, seqlens[b]).view(np.uint8))
        changed += Lnew
        qb = rotate(q[b], cos, sin, seqlens[b] + np.arange(Lq), interleaved).astype(dtype) if rotary else q[b]
        ref = tileattn.reference(qb[None], keys[None], vals[None], causal=causal)
        eager = tileattn.eager(qb[None], keys[None], vals[None], causal=causal)
        err = np.abs(out[b].astype(np.float64) - ref[0]).max()
        err_eager = np.abs(eager[0].astype(np.float64) - ref[0]).max()
        assert err <= 2 * err_eager + (1e-6 if dtype == np.float32 else 2.0**-8), (b, err, err_eager)
    # Nothing else in the cache changed: count the differing rows.
    diff = (kc.view(np.uint8) != k_before.view(np.uint8)).reshape(-1, Hkv * D * np.dtype(dtype).itemsize).any(1)
    assert diff.sum() == changed


DTYPES = [np.float32] + ([BF16] if BF16 is not None else [])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("page_size", [0, 1, 16], ids=lambda p: f"page{p}" if p else "contiguous")
@pytest.mark.parametrize("rotary, interleaved", [(False, True), (True, True), (True, False)],
                         ids=["plain", "rope", "neox"])
def test_kvcache_append_and_attend(dtype, page_size, rotary, interleaved):
    run_case(dtype, page_size, rotary, interleaved)


def test_int_cache_seqlens_and_torch():
    torch = pytest.importorskip("torch")
    q = torch.randn(2, 1, 4, 16)
    kc, vc = torch.randn(2, 30, 1, 16), torch.randn(2, 30, 1, 16)
    k, v = torch.randn(2, 1, 1, 16), torch.randn(2, 1, 1, 16)
    out = tileattn.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=12)
    assert torch.equal(kc[:, 12:13], k) and torch.equal(vc[:, 12:13], v)
    ref = tileattn.attention(q, kc[:, :13], vc[:, :13])
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)


def test_bad_arguments():
    q = np.zeros((1, 1, 2, 16), np.float32) + 0.5
    kc = np.ones((1, 8, 1, 16), np.float32)
    k = np.ones((1, 1, 1, 16), np.float32)
    before = kc.copy()
    with pytest.raises(ValueError, match="past the cache's capacity of 8"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), k, k, cache_seqlens=np.array([8], np.int32))
    with pytest.raises(TypeError, match="^cache_seqlens: dtype int64 is not supported"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), cache_seqlens=np.array([3], np.int64))
    with pytest.raises(NotImplementedError, match="qv"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), qv=q)
    np.testing.assert_array_equal(kc, before)
