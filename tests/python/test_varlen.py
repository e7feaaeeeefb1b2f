"""flash_attn_varlen_func, attention_varlen and flash_attn_combine: each sequence against the
float64 reference, seqused rows holding NaN, split counts, bad arguments; torch (custom op,
opcheck, torch.compile) and CUDA where available."""

import numpy as np
import pytest

import tileattn

LENS_Q = [17, 0, 113, 1, 65]
LENS_K = [113, 5, 17, 300, 65]


def packed(lens, heads, dim, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((sum(lens), heads, dim)).astype(dtype)


def cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def per_sequence_reference(q, k, v, lens_q, lens_k, **options):
    """float64 out [total_q, H, D] and lse [H, total_q], each sequence a dense reference call."""
    out = np.full(q.shape, np.nan)
    lse = np.full((q.shape[1], q.shape[0]), np.nan)
    cq, ck = cu(lens_q), cu(lens_k)
    for b, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lq == 0:
            continue
        qs = q[cq[b]:cq[b] + lq][None]
        ks, vs = (x[ck[b]:ck[b] + lk][None] for x in (k, v))
        if lk == 0:
            out[cq[b]:cq[b] + lq], lse[:, cq[b]:cq[b] + lq] = 0.0, -np.inf
            continue
        o, l_ = tileattn.reference(qs, ks, vs, return_lse=True, **options)
        out[cq[b]:cq[b] + lq], lse[:, cq[b]:cq[b] + lq] = o[0], l_[0]
    return out, lse


@pytest.mark.parametrize("options", [{}, {"causal": True}, {"window_size": (20, 3)}, {"softcap": 10.0, "causal": True}])
@pytest.mark.parametrize("num_splits", [1, 0, 7])
def test_varlen_matches_each_sequence(options, num_splits):
    q = packed(LENS_Q, 4, 32, 0)
    k, v = packed(LENS_K, 2, 32, 1), packed(LENS_K, 2, 32, 2)
    out, lse = tileattn.flash_attn_varlen_func(
        q, k, v, cu(LENS_Q), cu(LENS_K), max(LENS_Q), max(LENS_K), num_splits=num_splits, return_attn_probs=True,
        **options,
    )
    window = options.get("window_size", (-1, -1))
    ref_out, ref_lse = per_sequence_reference(
        q, k, v, LENS_Q, LENS_K, causal=options.get("causal", False), window=window,
        softcap=options.get("softcap", 0.0),
    )
    assert out.shape == q.shape and lse.shape == (4, sum(LENS_Q))
    np.testing.assert_allclose(out, ref_out, atol=2e-5)
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=2e-5)
    assert np.all(np.isneginf(lse[~finite]))


def test_seqused_rows_hold_nan_and_never_leak():
    lens_q, lens_k, used_q, used_k = [9, 30], [40, 12], [5, 30], [40, 1]
    q = packed(lens_q, 2, 16, 3)
    k, v = packed(lens_k, 2, 16, 4), packed(lens_k, 2, 16, 5)
    cq, ck = cu(lens_q), cu(lens_k)
    for b in range(2):  # the rows that do not count: NaN
        q[cq[b] + used_q[b]:cq[b + 1]] = np.nan
        k[ck[b] + used_k[b]:ck[b + 1]] = np.nan
        v[ck[b] + used_k[b]:ck[b + 1]] = np.nan
    out = np.full(q.shape, 123.0, dtype=np.float32)
    out = tileattn.attention_varlen(
        q, k, v, cu(lens_q), cu(lens_k), seqused_q=np.array(used_q, np.int32), seqused_k=np.array(used_k, np.int32),
        causal=True,
    )
    ref = tileattn.reference_varlen(
        q, k, v, cu(lens_q), cu(lens_k), seqused_q=np.array(used_q, np.int32), seqused_k=np.array(used_k, np.int32),
        causal=True,
    )
    for b in range(2):
        rows = slice(cq[b], cq[b] + used_q[b])
        assert np.isfinite(out[rows]).all()
        np.testing.assert_allclose(out[rows], ref[rows], atol=2e-5)


def test_forced_splits_agree_with_one():
    rng = np.random.default_rng(9)
    q = rng.standard_normal((3, 1, 8, 64)).astype(np.float32)
    k, v = (rng.standard_normal((3, 5000, 2, 64)).astype(np.float32) for _ in range(2))
    one = tileattn.attention(q, k, v, num_splits=1)
    for splits in (0, 3, 100):
        np.testing.assert_allclose(tileattn.attention(q, k, v, num_splits=splits), one, atol=2e-6)


def test_combine_matches_the_merge():
    rng = np.random.default_rng(1)
    S, B, L, H, D = 4, 2, 5, 3, 8
    o = rng.standard_normal((S, B, L, H, D)).astype(np.float32)
    lse_bhl = (3 * rng.standard_normal((S, B, H, L))).astype(np.float32)
    lse_bhl[1:3, 0, 1, 2] = -np.inf  # two splits empty for one row
    o[1:3, 0, 2, 1] = np.nan         # and garbage in their outputs
    lse_bhl[:, 1, 0, 0] = -np.inf    # a row with every split empty
    lse_part = np.swapaxes(lse_bhl, -1, -2)  # flash-attn's [S, B, L, H] view
    out, lse = tileattn.flash_attn_combine(o, lse_part)
    assert out.shape == (B, L, H, D) and lse.shape == (B, L, H)
    m = np.max(lse_part, axis=0)
    safe = np.where(np.isinf(m), 0.0, m)
    w = np.exp(lse_part.astype(np.float64) - safe)
    total = w.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        want_lse = np.where(np.isneginf(m), -np.inf, safe + np.log(total))
        want = np.nansum(np.where(w[..., None] > 0, w[..., None] * o, 0.0), axis=0) / np.where(total > 0, total, 1)[..., None]
    np.testing.assert_allclose(out, want, atol=1e-5)
    np.testing.assert_allclose(lse[np.isfinite(want_lse)], want_lse[np.isfinite(want_lse)], atol=1e-5)
    assert np.isneginf(lse[1, 0, 0]) and (out[1, 0, 0] == 0).all()
    half, _ = tileattn.flash_attn_combine(o, lse_part, out_dtype="float16")
    assert half.dtype == np.float16


def test_bad_arguments_name_themselves():
    q, k, v = packed([3, 4], 2, 8, 0), packed([5, 6], 2, 8, 1), packed([5, 6], 2, 8, 2)
    with pytest.raises(TypeError, match="^cu_seqlens_q: dtype float32 is not supported"):
        tileattn.flash_attn_varlen_func(q, k, v, cu([3, 4]).astype(np.float32), cu([5, 6]), 4, 6)
    with pytest.raises(ValueError, match="^cu_seqlens_q: entry 2 is 2, less than entry 1"):
        tileattn.flash_attn_varlen_func(q, k, v, np.array([0, 3, 2], np.int32), cu([5, 6]), 4, 6)
    with pytest.raises(ValueError, match="^cu_seqlens_k: the last entry"):
        tileattn.flash_attn_varlen_func(q, k, v, cu([3, 4]), np.array([0, 5, 10], np.int32), 4, 6)
    with pytest.raises(ValueError, match="^seqused_k: entry 1 is 7"):
        tileattn.flash_attn_varlen_func(q, k, v, cu([3, 4]), cu([5, 6]), 4, 6, seqused_k=np.array([5, 7], np.int32))
    with pytest.raises(ValueError, match="^max_seqlen_q: 3 is less than sequence 1's length 4"):
        tileattn.flash_attn_varlen_func(q, k, v, cu([3, 4]), cu([5, 6]), 3, 6)
    with pytest.raises(ValueError, match="^num_splits: 300"):
        tileattn.flash_attn_varlen_func(q, k, v, cu([3, 4]), cu([5, 6]), 4, 6, num_splits=300)
    with pytest.raises(NotImplementedError, match="qv"):
        tileattn.flash_attn_varlen_func(q, k, v, cu([3, 4]), cu([5, 6]), 4, 6, qv=q)
    # flash-attn 2's order (dropout_p, softmax_scale after the maxima) puts them in seqused_q / k.
    with pytest.raises(TypeError, match="^seqused_q: got a float, which is not an array"):
        tileattn.flash_attn_varlen_func(q, k, v, cu([3, 4]), cu([5, 6]), 4, 6, 0.0, 0.125)
    with pytest.raises(ValueError, match="^q: rank 4"):
        tileattn.flash_attn_varlen_func(q[None], k, v, cu([3, 4]), cu([5, 6]), 4, 6)
    with pytest.raises(ValueError, match="^lse_partial: rank 3"):
        tileattn.flash_attn_combine(np.zeros((2, 1, 3, 2, 8), np.float32), np.zeros((2, 1, 3), np.float32))


torch = pytest.importorskip("torch")
import tileattn.torch  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and tileattn.cuda_device_count() > 0
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and tileattn's CUDA kernels")
VOP = torch.ops.tileattn.varlen_attention.default


def torch_case(device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(LENS_Q), 8, 64, generator=g).to(device=device, dtype=dtype)
    k = torch.randn(sum(LENS_K), 2, 64, generator=g).to(device=device, dtype=dtype)
    v = torch.randn(sum(LENS_K), 2, 64, generator=g).to(device=device, dtype=dtype)
    return q, k, v, torch.tensor(cu(LENS_Q), device=device), torch.tensor(cu(LENS_K), device=device)


def test_torch_cpu_matches_numpy():
    q, k, v, cq, ck = torch_case("cpu", torch.float32)
    out = tileattn.flash_attn_varlen_func(q, k, v, cq, ck, max(LENS_Q), max(LENS_K), causal=True)
    want = tileattn.flash_attn_varlen_func(q.numpy(), k.numpy(), v.numpy(), cq.numpy(), ck.numpy(), max(LENS_Q),
                                           max(LENS_K), causal=True)
    torch.testing.assert_close(out, torch.from_numpy(want), rtol=0, atol=0)


def test_varlen_op_opcheck_and_compile():
    q, k, v, cq, ck = torch_case("cpu", torch.float32)
    torch.library.opcheck(VOP, (q, k, v, cq, ck, None, None, max(LENS_Q), max(LENS_K), True, None, -1, 0, 0.0,
                                "auto", 0, True))

    def f(q, k, v):
        return tileattn.flash_attn_varlen_func(q, k, v, cq, ck, max(LENS_Q), max(LENS_K), causal=True)

    with torch.no_grad():
        torch.testing.assert_close(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v))


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("num_splits", [1, 0, 9])
def test_cuda_varlen_matches_cpu_reference(dtype, num_splits):
    q, k, v, cq, ck = torch_case("cuda", dtype)
    out, lse = tileattn.flash_attn_varlen_func(q, k, v, cq, ck, max(LENS_Q), max(LENS_K), causal=True,
                                               num_splits=num_splits, return_attn_probs=True)
    ref_out, ref_lse = per_sequence_reference(q.float().cpu().numpy(), k.float().cpu().numpy(),
                                              v.float().cpu().numpy(), LENS_Q, LENS_K, causal=True)
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    np.testing.assert_allclose(out.float().cpu().numpy(), ref_out, atol=tol)
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse.cpu().numpy()[finite], ref_lse[finite], atol=1e-2)


@needs_cuda
def test_cuda_checked_mode():
    q, k, v, cq, ck = torch_case("cuda", torch.bfloat16)
    bad = ck.clone()
    bad[1] = 1000
    with pytest.raises(ValueError, match="^cu_seqlens_k: entry 2"):
        tileattn.attention_varlen(q, k, v, cq, bad, max_seqlen_q=max(LENS_Q), max_seqlen_k=max(LENS_K),
                                  check_indices=True)
    with pytest.raises(ValueError, match="^max_seqlen_q: is required"):
        tileattn.attention_varlen(q, k, v, cq, ck)


@needs_cuda
def test_cuda_combine_matches_cpu():
    g = torch.Generator().manual_seed(2)
    o = torch.randn(5, 2, 7, 4, 128, generator=g)
    lse = 3 * torch.randn(5, 2, 4, 7, generator=g)
    lse[::2, 0, 1, 3] = -float("inf")
    want, want_lse = tileattn.flash_attn_combine(o, lse.transpose(-1, -2))
    got, got_lse = tileattn.flash_attn_combine(o.cuda(), lse.cuda().transpose(-1, -2), out_dtype=torch.bfloat16)
    torch.testing.assert_close(got.float().cpu(), want, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(got_lse.cpu(), want_lse, atol=1e-5, rtol=1e-5)
