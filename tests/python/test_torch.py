"""tileattn with PyTorch: tensors in and out, the custom op (opcheck, torch.compile), autograd's
error, and on CUDA agreement with SDPA and the caller's stream. Skipped without torch; the CUDA
tests skip without a GPU or without tileattn's CUDA kernels."""

import math

import numpy as np
import pytest

import numpy_reference
import tileattn

torch = pytest.importorskip("torch")
import tileattn.torch  # noqa: E402  (needs torch)

HAS_GPU = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(
    not HAS_GPU or tileattn.cuda_device_count() == 0,
    reason="needs a CUDA GPU and tileattn built with its CUDA kernels"
    + ("" if tileattn.built_with_cuda() else " (this build has none)"),
)
OP = torch.ops.tileattn.attention.default
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def make_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, device="cpu", seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    shapes = [(batch, seqlen_q, heads_q, head_dim)] + [(batch, seqlen_k, heads_kv, head_dim)] * 2
    return [torch.randn(s, generator=g).to(dtype=dtype, device=device) for s in shapes]


def reference(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0):
    """float64 attention in torch from the definition (bottom-right aligned masks), any device."""
    q, k, v = (x.double() for x in (q, k, v))
    seqlen_q, heads_q, head_dim = q.shape[1:]
    seqlen_k, heads_kv = k.shape[1:3]
    k = k.repeat_interleave(heads_q // heads_kv, dim=2)
    v = v.repeat_interleave(heads_q // heads_kv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * (scale or 1 / math.sqrt(head_dim))
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(seqlen_q, device=q.device)[:, None]
    j = torch.arange(seqlen_k, device=q.device)[None, :]
    diagonal = i + seqlen_k - seqlen_q
    left, right = window[0], 0 if causal else window[1]
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    if right >= 0:
        visible &= j <= diagonal + right
    if left >= 0:
        visible &= j >= diagonal - left
    s = s.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # rows that see nothing: lse -inf, p 0
    return torch.einsum("bhij,bjhd->bihd", p, v), lse


def max_err(x, ref):
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(x.double()), finite)
    return (x.double() - ref).abs()[finite].max().item() if finite.any() else 0.0


def rounding_atol(ref, dtype):
    return 2 * ((ref + 0.3).to(dtype).double() - 0.3 - ref).abs().max().item()


# -- CPU tensors ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_cpu_tensors(dtype, causal):
    q, k, v = make_qkv(2, 37, 53, 6, 2, 40, dtype)
    out, lse = tileattn.attention(q, k, v, causal=causal, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == q.device
    assert lse.dtype == torch.float32 and lse.shape == (2, 6, 37)
    eager_out, eager_lse = tileattn.eager(q, k, v, causal=causal, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, causal=causal)
    atol = rounding_atol(ref_out, dtype)
    assert max_err(out, ref_out) <= 2 * max_err(eager_out, ref_out) + atol
    assert max_err(lse, ref_lse) <= 2 * max_err(eager_lse, ref_lse) + 1e-5
    # The NumPy reference of this folder agrees (a check of this file's torch reference).
    np_out, _ = numpy_reference.attention(*(x.float().numpy() for x in (q, k, v)), causal=causal)
    np.testing.assert_allclose(ref_out.numpy(), np_out, atol=1e-5)


def test_cpu_strided_views_and_flash_attn_func():
    q, k, v = make_qkv(2, 45, 45, 4, 4, 64, torch.bfloat16)
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # [B, H, L, D] storage
    views = [x.transpose(1, 2) for x in (qt, kt, vt)]
    assert not views[0].is_contiguous()
    torch.testing.assert_close(
        tileattn.attention(*views, causal=True),
        tileattn.attention(q, k, v, causal=True),
        rtol=0,
        atol=0,
    )
    torch.testing.assert_close(
        tileattn.flash_attn_func(q, k, v, causal=True, softmax_scale=0.125),
        tileattn.attention(q, k, v, causal=True, scale=0.125),
        rtol=0,
        atol=0,
    )


def test_reference_returns_float64_tensors():
    q, k, v = make_qkv(1, 9, 11, 2, 1, 16, torch.float16)
    out, lse = tileattn.reference(q, k, v, causal=True, return_lse=True)
    assert out.dtype == torch.float64 and lse.dtype == torch.float64
    ref_out, ref_lse = reference(q, k, v, causal=True)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)


def test_mixed_kinds_are_a_type_error():
    q, k, v = make_qkv(1, 4, 4, 2, 2, 16, torch.float32)
    with pytest.raises(TypeError, match=r"^k: a numpy.ndarray, but q is a torch.Tensor"):
        tileattn.attention(q, k.numpy(), v)
    with pytest.raises(TypeError, match=r"^q: dtype float64 is not supported"):
        tileattn.attention(q.double(), k, v)


def test_requires_grad_records_the_op_and_no_grad_does_not():
    q, k, v = make_qkv(1, 8, 8, 2, 2, 16, torch.float32)
    q.requires_grad_(True)
    out = tileattn.attention(q, k, v, causal=True)
    assert out.requires_grad
    torch.testing.assert_close(out.detach(), tileattn.attention(q.detach(), k, v, causal=True))
    out.sum().backward()  # the gradients' values: test_backward.py
    assert q.grad is not None and q.grad.shape == q.shape
    with torch.no_grad():
        assert not tileattn.attention(q, k, v).requires_grad
    # eager and reference are not ops: they accept such tensors and return plain ones.
    assert not tileattn.eager(q, k, v).requires_grad


def test_plain_calls_and_the_op_agree():
    # Without autograd or torch.compile, tileattn.attention skips the dispatcher.
    q, k, v = make_qkv(2, 50, 70, 4, 2, 64, torch.bfloat16)
    direct = tileattn.attention(q, k, v, causal=True, window=(9, -1), return_lse=True)
    via_op = OP(q, k, v, True, None, 9, -1, 0.0, "auto", 0, True)
    for a, b in zip(direct, via_op):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_op_computes_lse_only_when_asked():
    q, k, v = make_qkv(1, 20, 20, 2, 2, 32, torch.float32)
    out, lse = OP(q, k, v, False, None, -1, -1, 0.0, "auto", 0, False)
    assert lse.shape == (0,)
    torch.testing.assert_close(out, tileattn.attention(q, k, v), rtol=0, atol=0)


def test_kernel_by_name():
    q, k, v = make_qkv(1, 20, 20, 2, 2, 32, torch.float32)
    torch.testing.assert_close(tileattn.attention(q, k, v, kernel="cpu"), tileattn.attention(q, k, v), rtol=0, atol=0)
    with pytest.raises(ValueError, match="^kernel: sm90 runs on CUDA tensors"):
        tileattn.attention(q, k, v, kernel="sm90")
    with pytest.raises(ValueError, match="^kernel: 'fast', expected one of"):
        tileattn.attention(q, k, v, kernel="fast")


def opcheck_cases(device):
    # The CUDA kernels take 16-bit inputs; the CPU ones float32 too.
    dtypes = [torch.float32, torch.bfloat16] if device == "cpu" else [torch.float16, torch.bfloat16]
    for dtype in dtypes:
        q, k, v = make_qkv(2, 17, 33, 4, 2, 32, dtype, device)
        yield (q, k, v, False, None, -1, -1, 0.0, "auto", 0, True)
        yield (q, k, v, True, 0.2, 8, 0, 0.0, "auto", 0, False)
        yield (q, k, v, False, None, 3, 5, 10.0, "auto", 0, True)
        yield (q.transpose(1, 2).contiguous().transpose(1, 2), k, v, True, None, -1, -1, 0.0, "auto", 0, True)


@pytest.mark.parametrize("case", list(opcheck_cases("cpu")), ids=lambda c: "")
def test_opcheck_cpu(case):
    torch.library.opcheck(OP, case)


class AttentionBlock(torch.nn.Module):
    """A small pre-norm attention block (GQA) built on tileattn.torch.attention."""

    def __init__(self, dim=128, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        batch, seqlen, _ = x.shape
        h = self.qkv(self.norm(x))
        q, k, v = h.split(
            [
                self.heads * self.head_dim,
                self.kv_heads * self.head_dim,
                self.kv_heads * self.head_dim,
            ],
            dim=-1,
        )
        q = q.view(batch, seqlen, self.heads, self.head_dim)
        k = k.view(batch, seqlen, self.kv_heads, self.head_dim)
        v = v.view(batch, seqlen, self.kv_heads, self.head_dim)
        o = tileattn.torch.attention(q, k, v, causal=True)
        return x + self.proj(o.reshape(batch, seqlen, -1))


def check_compiled_block(device, dtype, backend):
    torch.manual_seed(0)
    block = AttentionBlock().to(device=device, dtype=dtype)
    x = torch.randn(2, 77, 128, device=device, dtype=dtype)
    with torch.no_grad():
        want = block(x)
        compiled = torch.compile(block, backend=backend, fullgraph=True, dynamic=False)
        got = compiled(x)
        got_other_length = compiled(x[:, :31])  # a recompile for a new length
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    with torch.no_grad():
        torch.testing.assert_close(got_other_length, block(x[:, :31]), rtol=tol, atol=tol)
    # With parameters that require grad the compiled model trains (gradients: test_backward.py).
    torch.compile(block, backend=backend)(x).float().sum().backward()
    assert all(p.grad is not None and p.grad.isfinite().all() for p in block.parameters())


@pytest.mark.parametrize("entry", ["attention", "flash_attn_func"])
def test_compile_fullgraph_through_the_generic_functions(entry):
    # tileattn.attention and flash_attn_func check their arguments in Python, then call the op:
    # torch.compile traces through them without a graph break.
    torch._dynamo.reset()
    q, k, v = make_qkv(1, 33, 33, 4, 2, 32, torch.float32)
    function = getattr(tileattn, entry)

    def f(q, k, v):
        return function(q, k, v, causal=True) * 2

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v)
    torch.testing.assert_close(got, f(q, k, v), rtol=0, atol=0)


def test_compile_cpu():
    torch._dynamo.reset()
    check_compiled_block("cpu", torch.float32, backend="aot_eager")


# -- CUDA tensors -----------------------------------------------------------------------------


def sdpa(q, k, v, causal):
    """torch's scaled_dot_product_attention on [B, L, H, D] tensors, bottom-right causal."""
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    if kt.shape[1] != qt.shape[1]:  # GQA: repeat kv heads (enable_gqa needs torch >= 2.5)
        group = qt.shape[1] // kt.shape[1]
        kt, vt = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)
    seqlen_q, seqlen_k = qt.shape[2], kt.shape[2]
    if causal and seqlen_q != seqlen_k:  # SDPA's is_causal is top-left aligned
        i = torch.arange(seqlen_q, device=q.device)[:, None]
        j = torch.arange(seqlen_k, device=q.device)[None, :]
        mask = j <= i + seqlen_k - seqlen_q
        return torch.nn.functional.scaled_dot_product_attention(
            qt, kt, vt, attn_mask=mask
        ).transpose(1, 2)
    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(
        1, 2
    )


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim",
    [
        (2, 1, 512, 8, 2, 128),  # decoding, GQA
        (2, 1000, 1000, 8, 8, 64),
        (1, 999, 1537, 16, 2, 128),  # GQA, off the tile grid
        (3, 257, 129, 6, 3, 96),
    ],
)
def test_cuda_matches_sdpa(dtype, causal, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim):
    q, k, v = make_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, "cuda")
    out, lse = tileattn.attention(q, k, v, causal=causal, return_lse=True)
    assert out.is_cuda and out.dtype == dtype and out.shape == q.shape
    ref_out, ref_lse = reference(q, k, v, causal=causal)
    peer = sdpa(q, k, v, causal)
    assert torch.isfinite(peer[ref_lse.transpose(1, 2).isfinite()]).all()
    atol = rounding_atol(ref_out, dtype)
    visible = ref_lse.transpose(1, 2).isfinite()[..., None].expand_as(ref_out)
    err = (out.double() - ref_out)[visible].abs().max().item()
    peer_err = (peer.double() - ref_out)[visible].abs().max().item()
    assert err <= 2 * peer_err + atol, (err, peer_err, atol)
    assert (out[~visible] == 0).all()
    assert max_err(lse, ref_lse) <= 1e-3 * max(1.0, ref_lse[ref_lse.isfinite()].abs().max().item())


@needs_cuda
def test_cuda_sdpa_enable_gqa():
    if "enable_gqa" not in torch.nn.functional.scaled_dot_product_attention.__doc__:
        pytest.skip("this torch has no enable_gqa")
    q, k, v = make_qkv(2, 300, 300, 8, 2, 128, torch.bfloat16, "cuda")
    peer = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(1, 2) for x in (q, k, v)), is_causal=True, enable_gqa=True
    ).transpose(1, 2)
    out = tileattn.flash_attn_func(q, k, v, causal=True)
    ref, _ = reference(q, k, v, causal=True)
    assert (out.double() - ref).abs().max() <= 2 * (
        peer.double() - ref
    ).abs().max() + rounding_atol(ref, torch.bfloat16)


@needs_cuda
def test_cuda_strided_views():
    q, k, v = make_qkv(2, 200, 200, 8, 4, 64, torch.bfloat16, "cuda")
    views = [
        x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v)
    ]  # [B, H, L, D] storage
    torch.testing.assert_close(
        tileattn.attention(*views, causal=True),
        tileattn.attention(q, k, v, causal=True),
        rtol=0,
        atol=0,
    )


@needs_cuda
def test_cuda_runs_on_the_current_stream():
    # On a side stream, a long sleep is followed by writing q; tileattn must run after that write,
    # which it does only if it is queued on the same stream (side streams are non-blocking, so
    # the legacy default stream would not wait).
    q, k, v = make_qkv(2, 256, 256, 4, 4, 64, torch.bfloat16, "cuda")
    want = tileattn.attention(q, k, v)
    q_stale = torch.zeros_like(q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s
        q_stale.copy_(q)
        got = tileattn.attention(q_stale, k, v)
    side.synchronize()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@needs_cuda
def test_cuda_float32_runs_or_is_a_type_error():
    q, k, v = make_qkv(1, 40, 40, 2, 2, 64, torch.float32, "cuda")
    try:
        out = tileattn.attention(q, k, v)
    except TypeError as error:  # the CUDA kernels may take 16-bit inputs only
        assert str(error).startswith("q: dtype fp32") and error.argument == "q"
    else:
        torch.testing.assert_close(
            out.cpu(), tileattn.attention(q.cpu(), k.cpu(), v.cpu()), rtol=1e-3, atol=1e-3
        )


@needs_cuda
def test_cuda_device_mismatch_is_a_value_error():
    q, k, v = make_qkv(1, 8, 8, 2, 2, 64, torch.float16, "cuda")
    with pytest.raises(ValueError, match=r"^k: is on cpu but q is on cuda:0"):
        tileattn.attention(q, k.cpu(), v)


@needs_cuda
@pytest.mark.parametrize("case", list(opcheck_cases("cuda")) if HAS_GPU else [], ids=lambda c: "")
def test_opcheck_cuda(case):
    torch.library.opcheck(OP, case)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_compile_cuda(dtype):
    torch._dynamo.reset()
    check_compiled_block("cuda", dtype, backend="inductor")


def test_parameters_and_grad_tensors_under_no_grad():
    q, k, v = make_qkv(1, 9, 9, 2, 2, 16, torch.float32)
    qp = torch.nn.Parameter(q.clone())
    with torch.no_grad():
        torch.testing.assert_close(tileattn.attention(qp, k, v), tileattn.attention(q, k, v), rtol=0, atol=0)
