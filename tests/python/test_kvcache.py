"""flash_attn_with_kvcache on CPU arrays: contiguous and paged caches, in-place append with and
without rotary, against the float64 oracle on the keys gathered from the updated cache; on CUDA
torch tensors against the CPU on the same inputs, and one decode step captured in a CUDA graph."""

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


def test_block_table_is_page_table():
    # flash-attn 2's name for the page table, by keyword: the same call, the same bits.
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 1, 4, 16)).astype(np.float32)
    pages = rng.standard_normal((5, 4, 2, 16)).astype(np.float32)
    table = np.array([[3, 0], [4, 1]], np.int32)
    seqlens = np.array([6, 3], np.int32)
    want = tileattn.flash_attn_with_kvcache(q, pages, pages, cache_seqlens=seqlens, page_table=table)
    got = tileattn.flash_attn_with_kvcache(q, pages, pages, cache_seqlens=seqlens, block_table=table)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="^block_table: dtype int64 is not supported"):  # named as passed
        tileattn.flash_attn_with_kvcache(q, pages, pages, cache_seqlens=seqlens, block_table=table.astype(np.int64))


def test_bad_arguments():
    q = np.zeros((1, 1, 2, 16), np.float32) + 0.5
    kc = np.ones((1, 8, 1, 16), np.float32)
    k = np.ones((1, 1, 1, 16), np.float32)
    before = kc.copy()
    with pytest.raises(ValueError, match="past the cache's capacity of 8"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), k, k, cache_seqlens=np.array([8], np.int32))
    with pytest.raises(TypeError, match="^cache_seqlens: dtype int64 is not supported"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), cache_seqlens=np.array([3], np.int64))
    with pytest.raises(NotImplementedError, match=r"^qv=numpy.ndarray: .*rotary_cos, rotary_sin here"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), qv=q)
    with pytest.raises(TypeError, match="^block_table: given with page_table"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), page_table=np.zeros((1, 1), np.int32),
                                         block_table=np.zeros((1, 1), np.int32))
    with pytest.raises(ValueError, match="^kernel: sm90 runs on CUDA tensors, but q is on the CPU"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), k, k, cache_seqlens=np.array([3], np.int32), kernel="sm90")
    with pytest.raises(ValueError, match="^kernel: 'tma', expected one of"):
        tileattn.flash_attn_with_kvcache(q, kc, kc.copy(), kernel="tma")
    np.testing.assert_array_equal(kc, before)


# -- CUDA: the same calls on torch CUDA tensors against the CPU on the same inputs ------------------

def _cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or tileattn.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    return torch


def _within_one_ulp(a, b):
    """Two bf16/fp16 tensors' bits at most one unit in the last place apart (same sign)."""
    import torch

    x, y = a.reshape(-1).view(torch.int16).int(), b.reshape(-1).view(torch.int16).int()
    return bool(((x - y).abs() <= 1).all())


def _kv_inputs(torch, page_size, rotary, packed, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    B, Hq, Hkv, D, cap = 3, 8, 2, 128, 300
    lens_q, lens_new = [1, 5, 2], [1, 3, 0]
    seqlens = torch.tensor([10, 0, 257], dtype=torch.int32)
    rand = lambda *shape: torch.randn(*shape, generator=g).to(dtype)
    args = {}
    if packed:
        q = rand(sum(lens_q), Hq, D)
        args["k"], args["v"] = rand(sum(lens_new), Hkv, D), rand(sum(lens_new), Hkv, D)
        cu = lambda lens: torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32)
        args["cu_seqlens_q"], args["cu_seqlens_k_new"] = cu(lens_q), cu(lens_new)
        args["max_seqlen_q"] = max(lens_q)
    else:
        q = rand(B, 2, Hq, D)
        args["k"], args["v"] = rand(B, 2, Hkv, D), rand(B, 2, Hkv, D)
    if page_size:
        max_pages = -(-cap // page_size)
        order = torch.randperm(B * max_pages + 2, generator=g).to(torch.int32)
        args["page_table"] = order[:B * max_pages].reshape(B, max_pages).contiguous()
        kc = rand(len(order), page_size, Hkv, D)
    elif page_size == 0:  # cache rows through cache_batch_idx
        kc = rand(B + 1, cap, Hkv, D)
        args["cache_batch_idx"] = torch.tensor([2, 0, 3], dtype=torch.int32)
    else:  # None: a contiguous cache as one tensor, row b for sequence b
        kc = rand(B, cap, Hkv, D)
        args["cache_leftpad"] = torch.tensor([0, 0, 40], dtype=torch.int32)
    vc = rand(*kc.shape)
    if rotary:
        theta = torch.arange(cap + 8, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(16) / 16)
        args["rotary_cos"], args["rotary_sin"] = theta.cos().float(), theta.sin().float()
    args["cache_seqlens"] = seqlens
    return q, kc, vc, args


@pytest.mark.parametrize("page_size", [None, 0, 1, 7, 16, 256],
                         ids=lambda p: "contiguous" if p is None else f"page{p}" if p else "batch_idx")
@pytest.mark.parametrize("rotary, interleaved", [(False, True), (True, True), (True, False)],
                         ids=["plain", "rope", "neox"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_cuda_matches_cpu(page_size, rotary, interleaved, packed):
    torch = _cuda_torch()
    q, kc, vc, args = _kv_inputs(torch, page_size, rotary, packed, torch.bfloat16,
                                 seed=(page_size or 0) + 3 * packed)
    cuda = lambda x: x.cuda() if isinstance(x, torch.Tensor) else x
    q_d, kc_d, vc_d = cuda(q), cuda(kc), cuda(vc)
    args_d = {name: cuda(x) for name, x in args.items()}
    options = dict(causal=True, rotary_interleaved=interleaved, return_softmax_lse=True, num_splits=0)
    out, lse = tileattn.flash_attn_with_kvcache(q, kc, vc, **args, **options)
    out_d, lse_d = tileattn.flash_attn_with_kvcache(q_d, kc_d, vc_d, **args_d, **options,
                                                    check_indices=page_size == 7)
    assert out_d.is_cuda and out_d.dtype == out.dtype and out_d.shape == out.shape
    torch.testing.assert_close(out_d.cpu().float(), out.float(), rtol=0, atol=2e-2)
    torch.testing.assert_close(lse_d.cpu(), lse, rtol=0, atol=1e-2)
    assert _within_one_ulp(kc_d.cpu(), kc) and torch.equal(vc_d.cpu(), vc)


def test_cuda_checked_mode_names_the_bad_index():
    torch = _cuda_torch()
    q, kc, vc, args = _kv_inputs(torch, 16, True, False, torch.bfloat16, seed=5)
    args = {name: x.cuda() if isinstance(x, torch.Tensor) else x for name, x in args.items()}
    q, kc, vc = q.cuda(), kc.cuda(), vc.cuda()
    k_before, v_before = kc.clone(), vc.clone()
    table = args["page_table"].clone()
    table[2, 3] = 1000  # sequence 2 uses pages 0..16
    with pytest.raises(ValueError, match=r"^page_table: entry \[2, 3\] is 1000"):
        tileattn.flash_attn_with_kvcache(q, kc, vc, **dict(args, page_table=table), check_indices=True)
    seqlens = args["cache_seqlens"].clone()
    seqlens[1] = -1
    with pytest.raises(ValueError, match="^cache_seqlens: entry 1 is -1"):
        tileattn.flash_attn_with_kvcache(q, kc, vc, **dict(args, cache_seqlens=seqlens), check_indices=True)
    assert torch.equal(kc, k_before) and torch.equal(vc, v_before)


def test_cuda_int_cache_seqlens_and_current_stream():
    torch = _cuda_torch()
    q = torch.randn(2, 1, 4, 64, device="cuda", dtype=torch.float16)
    kc = torch.randn(2, 40, 1, 64, device="cuda", dtype=torch.float16)
    vc = torch.randn_like(kc)
    k, v = torch.randn(2, 1, 1, 64, device="cuda", dtype=torch.float16), torch.randn(2, 1, 1, 64, device="cuda",
                                                                                  dtype=torch.float16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = tileattn.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=12)
    stream.synchronize()
    assert torch.equal(kc[:, 12:13], k) and torch.equal(vc[:, 12:13], v)
    ref = tileattn.flash_attn_with_kvcache(q.cpu(), kc.cpu(), vc.cpu(), cache_seqlens=13)
    torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=0, atol=2e-3)


@pytest.mark.parametrize("paged", [True, False], ids=["paged", "contiguous"])
def test_cuda_graph_decode_step(paged):
    """One decode step captured with device cache_seqlens, replayed after changing them in place:
    the outputs and caches equal those of uncaptured calls on the same inputs, bit for bit (the
    graph's outputs poisoned with NaN before each replay)."""
    torch = _cuda_torch()
    torch.manual_seed(0)
    B, Hq, Hkv, D, page, max_pages = 2, 8, 2, 128, 16, 32
    dt = dict(device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(B * max_pages, dtype=torch.int32).reshape(B, max_pages).cuda() if paged else None
    kc0 = torch.randn(B * max_pages, page, Hkv, D, **dt) if paged else torch.randn(B, page * max_pages, Hkv, D, **dt)
    vc0 = torch.randn_like(kc0)
    kc, vc = kc0.clone(), vc0.clone()
    q, k, v = torch.randn(B, 1, Hq, D, **dt), torch.randn(B, 1, Hkv, D, **dt), torch.randn(B, 1, Hkv, D, **dt)
    theta = torch.arange(page * max_pages + 1, device="cuda")[:, None] * 10000.0 ** (
        -torch.arange(32, device="cuda") / 32)
    cos, sin = theta.cos().to(torch.bfloat16), theta.sin().to(torch.bfloat16)
    seqlens = torch.tensor([100, 300], dtype=torch.int32, device="cuda")

    def step():
        return tileattn.flash_attn_with_kvcache(q, kc, vc, k, v, rotary_cos=cos, rotary_sin=sin,
                                                cache_seqlens=seqlens, page_table=table, causal=True,
                                                return_softmax_lse=True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_g, lse_g = step()
    for lens in ([100, 300], [7, 511], [0, 1], [257, 33]):
        kc.copy_(kc0), vc.copy_(vc0), seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
        out_g.fill_(float("nan")), lse_g.fill_(float("nan"))
        graph.replay()
        got = (out_g.clone(), lse_g.clone(), kc.clone(), vc.clone())
        assert torch.isfinite(got[0]).all() and torch.isfinite(got[1]).all(), lens
        kc.copy_(kc0), vc.copy_(vc0)
        out, lse = step()
        torch.cuda.synchronize()
        for name, a, b in zip(("out", "lse", "k_cache", "v_cache"), got, (out, lse, kc, vc)):
            assert torch.equal(a, b), (lens, name)
