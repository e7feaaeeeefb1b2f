"""The backward: attention_backward on NumPy arrays against the float64 oracle (with eager's error
in the same dtype as the yardstick: err <= 3 err(eager) + atol), and torch autograd through
tileattn.attention, flash_attn_func and flash_attn_varlen_func against float64 autograd of the
definition; opcheck of the ops and a torch.compile'd training step. CUDA tests skip without a GPU."""

import math

import numpy as np
import pytest

import tileattn

try:
    import ml_dtypes

    BF16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover
    BF16 = None


def make(shape, dtype, rng):
    return rng.standard_normal(shape).astype(dtype)


def grad_err(x, ref):
    x = np.asarray(x).astype(np.float64)
    finite = np.isfinite(ref)
    assert (np.isfinite(x) == finite).all()
    return float(np.abs(x - ref)[finite].max()) if finite.any() else 0.0


def check_numpy(shape, dtype, dlse=False, **options):
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim = shape
    rng = np.random.default_rng(sum(shape))
    q = make((batch, seqlen_q, heads_q, head_dim), dtype, rng)
    k, v = (make((batch, seqlen_k, heads_kv, head_dim), dtype, rng) for _ in range(2))
    dout = make(q.shape, dtype, rng)
    g_lse = make((batch, heads_q, seqlen_q), np.float32, rng) if dlse else None
    out, lse = tileattn.attention(q, k, v, return_lse=True, **options)
    ours = tileattn.attention_backward(dout, q, k, v, out, lse, dlse=g_lse, **options)
    ref = tileattn.reference_backward(dout, q, k, v, dlse=g_lse, **options)
    eager = tileattn.eager_backward(dout, q, k, v, dlse=g_lse, **options)
    for name, x, r, e, like in zip("qkv", ours, ref, eager, (q, k, v)):
        assert x.shape == like.shape and x.dtype == like.dtype and r.dtype == np.float64
        scale = max(1.0, float(np.abs(r).max()))
        err = grad_err(x, r)
        if dtype == np.float32:
            assert err <= 1e-4 * scale, (name, err)
        else:
            eps = 2.0**-7 if dtype == BF16 else 2.0**-10
            assert err <= 3 * grad_err(e, r) + eps * scale, (name, err, grad_err(e, r))


DTYPES = [np.float32, np.float16] + ([BF16] if BF16 is not None else [])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "shape",
    [(1, 1, 1, 1, 1, 8), (2, 17, 63, 4, 2, 40), (1, 65, 64, 2, 2, 64), (1, 113, 203, 6, 1, 32),
     (1, 203, 113, 2, 2, 80)],
    ids=str,
)
@pytest.mark.parametrize(
    "options",
    [{}, {"causal": True}, {"window": (16, 3)}, {"causal": True, "softcap": 6.0, "scale": 0.3}],
    ids=["full", "causal", "window", "causal_softcap"],
)
def test_numpy_matches_the_oracle(dtype, shape, options):
    check_numpy(shape, dtype, **options)


@pytest.mark.parametrize("dtype", DTYPES[::2], ids=lambda d: np.dtype(d).name)
def test_gradient_of_the_lse(dtype):
    check_numpy((2, 40, 70, 4, 2, 32), dtype, dlse=True, causal=True)


def test_bad_arguments_name_themselves():
    rng = np.random.default_rng(0)
    q, k, v = make((1, 8, 2, 16), np.float32, rng), make((1, 9, 1, 16), np.float32, rng), make((1, 9, 1, 16),
                                                                                               np.float32, rng)
    out, lse = tileattn.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=r"^dout: shape \[1, 7, 2, 16\] differs from out's"):
        tileattn.attention_backward(q[:, :7], q, k, v, out, lse)
    with pytest.raises(TypeError, match=r"^dout: dtype fp16 differs from q's fp32"):
        tileattn.attention_backward(q.astype(np.float16), q, k, v, out, lse)
    with pytest.raises(ValueError, match=r"^lse: "):
        tileattn.attention_backward(q, q, k, v, out, lse[:, :1])
    with pytest.raises(ValueError, match=r"^dlse: shape"):
        tileattn.attention_backward(q, q, k, v, out, lse, dlse=lse[:, :, :3])
    with pytest.raises(TypeError, match=r"^deterministic: expected a bool"):
        tileattn.attention_backward(q, q, k, v, out, lse, deterministic="yes")
    with pytest.raises(ValueError, match=r"^kernel: sm90 runs on CUDA tensors, but q is on the CPU"):
        tileattn.attention_backward(q, q, k, v, out, lse, kernel="sm90")
    with pytest.raises(ValueError, match=r"^kernel: 'fast', expected one of"):
        tileattn.attention_backward(q, q, k, v, out, lse, kernel="fast")
    np.testing.assert_array_equal(tileattn.attention_backward(q, q, k, v, out, lse, kernel="cpu")[0],
                                  tileattn.attention_backward(q, q, k, v, out, lse)[0])
    # The varlen entry takes kernel= alike.
    pq, pk, pv = (x.reshape(-1, *x.shape[2:]) for x in (q, k, v))
    cu_q = np.array([0, 3, pq.shape[0]], dtype=np.int32)
    cu_k = np.array([0, 4, pk.shape[0]], dtype=np.int32)
    lens = dict(max_seqlen_q=pq.shape[0] - 3, max_seqlen_k=pk.shape[0] - 4)
    o, l = tileattn.attention_varlen(pq, pk, pv, cu_q, cu_k, return_lse=True, **lens)
    with pytest.raises(ValueError, match=r"^kernel: sm90 runs on CUDA tensors, but q is on the CPU"):
        tileattn.attention_varlen_backward(pq, pq, pk, pv, o, l, cu_q, cu_k, kernel="sm90", **lens)


# -- torch autograd ---------------------------------------------------------------------------

torch = pytest.importorskip("torch")
import tileattn.torch  # noqa: E402


def torch_qkv(shape, dtype, device="cpu", seed=0, requires_grad=True):
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim = shape
    g = torch.Generator().manual_seed(seed)
    shapes = [(batch, seqlen_q, heads_q, head_dim)] + [(batch, seqlen_k, heads_kv, head_dim)] * 2
    return [torch.randn(s, generator=g).to(dtype=dtype, device=device).requires_grad_(requires_grad) for s in shapes]


def definition(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0):
    """Attention from the definition in torch (bottom-right masks), differentiable, any dtype."""
    heads_q, head_dim = q.shape[2:]
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    group = heads_q // k.shape[2]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * (scale or 1 / math.sqrt(head_dim))
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(seqlen_q, device=q.device)[:, None] + seqlen_k - seqlen_q
    j = torch.arange(seqlen_k, device=q.device)[None, :]
    right = 0 if causal else window[1]
    hidden = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    if right >= 0:
        hidden |= j > i + right
    if window[0] >= 0:
        hidden |= j < i - window[0]
    s = s.masked_fill(hidden, -math.inf)
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.exp(s.float() - lse[..., None]).nan_to_num(0.0).to(q.dtype)
    return torch.einsum("bhij,bjhd->bihd", p, v), lse


def autograd_grads(f, inputs, weights):
    outs = f(*inputs)
    loss = sum((o.double() * w).sum() for o, w in zip(outs, weights))
    return torch.autograd.grad(loss, inputs)


def check_autograd(shape, dtype, with_lse=False, device="cpu", **options):
    q, k, v = torch_qkv(shape, dtype, device)
    w_out = torch.randn(q.shape, dtype=torch.float64, device=device)
    weights = [w_out] + ([torch.randn(shape[0], shape[3], shape[1], dtype=torch.float64, device=device)]
                         if with_lse else [])

    def ours(q, k, v):
        out, lse = tileattn.attention(q, k, v, return_lse=True, **options)
        return (out, lse) if with_lse else (out,)

    def ref(q, k, v):
        out, lse = definition(q, k, v, **options)
        return (out, lse) if with_lse else (out,)

    got = autograd_grads(ours, (q, k, v), weights)
    want = autograd_grads(ref, [x.detach().double().requires_grad_() for x in (q, k, v)], weights)
    eager = autograd_grads(ref, (q, k, v), weights)  # autograd of the definition in the dtype
    for name, g, w, e, x in zip("qkv", got, want, eager, (q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape
        err, eager_err = (g.double() - w).abs().max().item(), (e.double() - w).abs().max().item()
        scale = max(1.0, w.abs().max().item())
        tol = 1e-4 * scale if dtype == torch.float32 else 3 * eager_err + 2.0**-7 * scale
        assert err <= tol, (name, err, eager_err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "options", [{}, {"causal": True}, {"window": (5, 2), "softcap": 4.0}], ids=["full", "causal", "window_softcap"]
)
def test_autograd_matches_float64_autograd(dtype, options):
    check_autograd((2, 33, 47, 4, 2, 24), dtype, **options)


def test_autograd_through_the_returned_lse():
    check_autograd((1, 29, 29, 2, 1, 16), torch.float32, with_lse=True, causal=True)


def test_flash_attn_func_trains_and_strided_inputs():
    q, k, v = torch_qkv((2, 40, 40, 4, 4, 32), torch.bfloat16)
    views = [x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for x in (q, k, v)]
    tileattn.flash_attn_func(q, k, v, causal=True, deterministic=True).float().square().sum().backward()
    tileattn.attention(*views, causal=True).float().square().sum().backward()
    for x, y in zip((q, k, v), views):
        torch.testing.assert_close(x.grad, y.grad, rtol=0, atol=0)


def test_attention_backward_on_torch_tensors_and_determinism():
    q, k, v = torch_qkv((3, 50, 60, 4, 2, 32), torch.bfloat16, requires_grad=False)
    out, lse = tileattn.attention(q, k, v, causal=True, return_lse=True)
    dout = torch.randn_like(out)
    first = tileattn.attention_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
    ref = tileattn.reference_backward(dout, q, k, v, causal=True)
    for g, r in zip(first, ref):
        assert g.dtype == torch.bfloat16 and r.dtype == torch.float64
        assert (g.double() - r).abs().max() <= 0.05 * max(1.0, r.abs().max().item())
    for _ in range(3):
        again = tileattn.attention_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_varlen_gradients_match_each_sequence_alone():
    lens_q, lens_k = [17, 1, 40], [30, 5, 40]
    g = torch.Generator().manual_seed(3)
    q = torch.randn(sum(lens_q), 4, 32, generator=g).requires_grad_()
    k = torch.randn(sum(lens_k), 2, 32, generator=g).requires_grad_()
    v = torch.randn(sum(lens_k), 2, 32, generator=g).requires_grad_()
    cu_q = torch.tensor(np.cumsum([0] + lens_q), dtype=torch.int32)
    cu_k = torch.tensor(np.cumsum([0] + lens_k), dtype=torch.int32)
    out = tileattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True)
    w = torch.randn_like(out)
    (out * w).sum().backward()
    for b in range(3):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        parts = [x.detach()[s][None].requires_grad_() for x, s in ((q, sq), (k, sk), (v, sk))]
        (tileattn.attention(*parts, causal=True) * w[sq][None]).sum().backward()
        for x, part, s in zip((q, k, v), parts, (sq, sk, sk)):
            torch.testing.assert_close(x.grad[s], part.grad[0], rtol=1e-5, atol=1e-5)


def test_eager_training_skips_the_dispatcher_with_the_ops_bits():
    # Eager autograd calls take one autograd.Function (host time); torch.compile takes the ops.
    q, k, v = torch_qkv((2, 37, 45, 4, 2, 24), torch.bfloat16)
    cu_q, cu_k = torch.tensor([0, 30, 74], dtype=torch.int32), torch.tensor([0, 45, 90], dtype=torch.int32)
    qp, kp, vp = (x.detach().reshape(-1, *x.shape[2:])[:n].requires_grad_() for x, n in ((q, 74), (k, 90), (v, 90)))
    for with_lse in (False, True):
        calls = [
            ((q, k, v), lambda q, k, v: tileattn.attention(q, k, v, causal=True, return_lse=True),
             lambda q, k, v: torch.ops.tileattn.attention(q, k, v, True, None, -1, -1, 0.0, "auto", 0, True)),
            ((qp, kp, vp),
             lambda q, k, v: tileattn.attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=44, max_seqlen_k=45,
                                                       causal=True, return_lse=True),
             lambda q, k, v: torch.ops.tileattn.varlen_attention(q, k, v, cu_q, cu_k, None, None, 44, 45, True, None,
                                                                 -1, -1, 0.0, "auto", 0, True)),
        ]
        for inputs, eager, op in calls:
            outs = eager(*inputs)
            assert type(outs[0].grad_fn).__name__ == "_EagerAttentionBackward"
            weights = [torch.randn(o.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
                       for o in outs][: 2 if with_lse else 1]
            got = autograd_grads(lambda *x: eager(*x), inputs, weights)
            want = autograd_grads(lambda *x: op(*x), inputs, weights)
            for g, w in zip(got, want):
                assert torch.equal(g, w)


def test_meta_tensors_and_dispatch_modes_see_the_op():
    from torch.utils._python_dispatch import TorchDispatchMode

    for grad in (False, True):
        q = torch.empty(2, 9, 4, 16, device="meta", requires_grad=grad)
        out = tileattn.attention(q, q, q, causal=True)
        assert out.device.type == "meta" and out.shape == q.shape

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    q, k, v = torch_qkv((1, 9, 9, 2, 2, 16), torch.float32)
    with Ops() as mode:
        tileattn.attention(q, k, v).sum().backward()
    assert {"tileattn.attention", "tileattn.attention_backward"} <= mode.seen, mode.seen


def test_varlen_rows_past_seqused_get_zero_gradient():
    q = torch.randn(2, 30, 2, 16).requires_grad_()
    k = torch.randn(2, 30, 2, 16).requires_grad_()
    v = torch.randn(2, 30, 2, 16).requires_grad_()
    used = torch.tensor([20, 30], dtype=torch.int32)
    out = tileattn.attention_varlen(q, k, v, seqused_q=used, seqused_k=used)
    out[0, :20].sum().backward()
    assert (q.grad[0, 20:] == 0).all() and (k.grad[0, 20:] == 0).all() and (v.grad[0, 20:] == 0).all()
    assert q.grad[0, :20].abs().sum() > 0


OP = torch.ops.tileattn.attention.default
BACKWARD_OP = torch.ops.tileattn.attention_backward.default


@pytest.mark.parametrize("causal, window, softcap", [(False, -1, 0.0), (True, -1, 0.0), (False, 5, 3.0)])
def test_opcheck_with_autograd(causal, window, softcap):
    q, k, v = torch_qkv((2, 17, 33, 4, 2, 32), torch.float32)
    torch.library.opcheck(OP, (q, k, v, causal, None, window, -1, softcap, "auto", 0, True, False))
    torch.library.opcheck(OP, (q, k, v, causal, 0.2, window, -1, softcap, "auto", 0, False, True))
    # The backward op has no backward of its own (no double backward): plain tensors.
    q, k, v = (x.detach() for x in (q, k, v))
    out, lse = OP(q, k, v, causal, None, window, -1, softcap, "auto", 0, True)
    dout = torch.randn_like(out)
    torch.library.opcheck(BACKWARD_OP, (dout, q, k, v, out, lse, None, causal, None, window, -1, softcap, False))
    torch.library.opcheck(BACKWARD_OP, (dout, q, k, v, out, lse, torch.randn_like(lse), causal, None, window, -1,
                                        softcap, True))


def test_opcheck_varlen_with_autograd():
    q = torch.randn(40, 4, 16, requires_grad=True)
    k = torch.randn(50, 2, 16, requires_grad=True)
    v = torch.randn(50, 2, 16, requires_grad=True)
    cu_q, cu_k = torch.tensor([0, 15, 40], dtype=torch.int32), torch.tensor([0, 25, 50], dtype=torch.int32)
    args = (q, k, v, cu_q, cu_k, None, None, 25, 25, True, None, -1, 0, 0.0, "auto", 0, True, False)
    torch.library.opcheck(torch.ops.tileattn.varlen_attention.default, args)
    q, k, v = (x.detach() for x in (q, k, v))
    out, lse = torch.ops.tileattn.varlen_attention(q, k, v, *args[3:16], True)
    backward_args = (torch.randn_like(out), q, k, v, out, lse, None, cu_q, cu_k, None, None, 25, 25, True, None, -1,
                     0, 0.0, False)
    torch.library.opcheck(torch.ops.tileattn.varlen_attention_backward.default, backward_args)


def test_compiled_training_step_matches_eager():
    from test_torch import AttentionBlock

    torch._dynamo.reset()
    torch.manual_seed(0)
    block, twin = AttentionBlock(), AttentionBlock()
    twin.load_state_dict(block.state_dict())
    compiled = torch.compile(twin, backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 45, 128)
    for model in (block, compiled):
        model(x).square().mean().backward()
    for (name, a), b in zip(block.named_parameters(), twin.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=name)


# -- CUDA -------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or tileattn.cuda_device_count() == 0 or not tileattn.built_with_cuda_backward(),
    reason="needs a CUDA GPU and tileattn built with its CUDA backward kernels (TILEATTN_CUDA_BACKWARD=ON)")


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(2, 300, 300, 8, 2, 128), (1, 127, 513, 4, 4, 64), (1, 200, 100, 2, 1, 256),
                                   (1, 90, 90, 2, 2, 72)], ids=str)
@pytest.mark.parametrize("options", [{}, {"causal": True}, {"window": (50, 0), "softcap": 20.0}],
                         ids=["full", "causal", "window_softcap"])
def test_cuda_autograd_matches_float64_autograd(dtype, shape, options):
    check_autograd(shape, dtype, device="cuda", **options)


@needs_cuda
def test_cuda_lse_gradient_varlen_and_opcheck():
    check_autograd((2, 64, 80, 4, 2, 64), torch.bfloat16, with_lse=True, device="cuda", causal=True)
    q, k, v = torch_qkv((2, 33, 65, 4, 2, 64), torch.bfloat16, "cuda")
    torch.library.opcheck(OP, (q, k, v, True, None, -1, -1, 0.0, "auto", 0, True, False))
    lens = [17, 100, 1]
    cu = torch.tensor(np.cumsum([0] + lens), dtype=torch.int32, device="cuda")
    qp = torch.randn(sum(lens), 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    kp = torch.randn(sum(lens), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    vp = torch.randn(sum(lens), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = tileattn.flash_attn_varlen_func(qp, kp, vp, cu, cu, max(lens), max(lens), causal=True)
    out.float().square().sum().backward()
    for b in range(3):
        s = slice(int(cu[b]), int(cu[b + 1]))
        parts = [x.detach()[s][None].requires_grad_() for x in (qp, kp, vp)]
        tileattn.attention(*parts, causal=True).float().square().sum().backward()
        for x, part in zip((qp, kp, vp), parts):
            torch.testing.assert_close(x.grad[s], part.grad[0], rtol=0, atol=0)


def _sm90_available():
    if not torch.cuda.is_available() or tileattn.cuda_device_count() == 0:
        return False
    x = torch.zeros(1, 1, 1, 64, device="cuda", dtype=torch.bfloat16)
    try:
        tileattn.attention(x, x, x, kernel="sm90")
        return True
    except ValueError:
        return False


@needs_cuda
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cuda_sm90_backward_matches_the_oracle_and_the_sm80_backward(causal):
    # The sm90 backward (kernel="sm90") against the float64 oracle, by the 3x rule against the
    # sm80 kernels' error (kernel="sm80") on the same inputs.
    if not _sm90_available():
        pytest.skip("no sm90 kernel on this GPU")
    for shape in [(2, 113, 203, 8, 2, 128), (1, 257, 129, 4, 4, 64), (1, 150, 130, 4, 2, 256)]:
        q, k, v = torch_qkv(shape, torch.bfloat16, "cuda", requires_grad=False)  # kernel= takes plain tensors
        out, lse = tileattn.attention(q, k, v, causal=causal, return_lse=True)
        dout = torch.randn_like(out)
        sm90 = tileattn.attention_backward(dout, q, k, v, out, lse, causal=causal, kernel="sm90")
        sm80 = tileattn.attention_backward(dout, q, k, v, out, lse, causal=causal, kernel="sm80")
        ref = tileattn.reference_backward(*(x.detach().cpu().double() for x in (dout, q, k, v)), causal=causal)
        for name, a, b, r in zip("qkv", sm90, sm80, ref):
            err_a = (a.double().cpu() - r).abs().max().item()
            err_b = (b.double().cpu() - r).abs().max().item()
            assert err_a <= 3 * err_b + 1e-3, f"d{name}: sm90 {err_a:.3g} against sm80 {err_b:.3g}"


@needs_cuda
@pytest.mark.parametrize("d", [64, 128, 256])
def test_cuda_sm90_varlen_backward_matches_the_oracle_and_the_sm80_backward(d):
    # Packed sequences (one empty, last blocks running into the next sequence) with seqused_q:
    # kernel="sm90" against the float64 oracle, by the 3x rule against the sm80 kernels' error.
    if not _sm90_available():
        pytest.skip("no sm90 kernel on this GPU")
    lens_q, lens_k, used_q = [113, 0, 200, 65], [203, 7, 129, 300], [100, 0, 200, 65]
    cu_q = torch.tensor(np.cumsum([0] + lens_q), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(np.cumsum([0] + lens_k), dtype=torch.int32, device="cuda")
    used = torch.tensor(used_q, dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(sum(lens_q), 8, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(sum(lens_k), 2, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    args = dict(max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k), seqused_q=used, causal=True)
    out, lse = tileattn.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, **args)
    dout = torch.randn_like(out)
    sm90 = tileattn.attention_varlen_backward(dout, q, k, v, out, lse, cu_q, cu_k, kernel="sm90", **args)
    sm80 = tileattn.attention_varlen_backward(dout, q, k, v, out, lse, cu_q, cu_k, kernel="sm80", **args)
    ref = tileattn.reference_backward(*(x.cpu().double() for x in (dout, q, k, v)), cu_seqlens_q=cu_q.cpu(),
                                      cu_seqlens_k=cu_k.cpu(), **dict(args, seqused_q=used.cpu()))
    for name, a, b, r in zip("qkv", sm90, sm80, ref):
        assert torch.isfinite(a).all(), f"d{name}: sm90 wrote a non-finite value"
        err_a = (a.double().cpu() - r).abs().max().item()
        err_b = (b.double().cpu() - r).abs().max().item()
        assert err_a <= 3 * err_b + 1e-3, f"d{name}: sm90 {err_a:.3g} against sm80 {err_b:.3g}"


@needs_cuda
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "default"])
def test_cuda_backward_repeatable_over_1000_runs_at_batch_60(deterministic):
    # flash-attn's race-condition shape: batch 60, a GQA group, Lq != Lk off the tile grid. The
    # deterministic mode must give the same bits on every run. The default mode may add dQ's fp32
    # sums in any order (the sm90 backward's atomics; the sm80 kernels keep one order): dK and dV
    # the same bits, dQ within a bf16 rounding of its sums.
    q, k, v = torch_qkv((60, 113, 239, 4, 2, 64), torch.bfloat16, "cuda")
    dout = torch.randn_like(q)
    def grads():
        out = tileattn.attention(q, k, v, causal=True, deterministic=deterministic)
        return torch.autograd.grad(out, (q, k, v), dout)
    first = grads()
    assert all(torch.isfinite(g).all() for g in first)
    dq_scale = first[0].abs().max().item()
    for run in range(1000):
        for name, a, b in zip("qkv", grads(), first):
            if deterministic or name != "q":
                assert torch.equal(a, b), f"d{name} differs from the first run's at run {run}"
            else:
                diff = (a.float() - b.float()).abs().max().item()
                assert diff <= 1e-2 * dq_scale, f"dq moved by {diff:.3g} (max |dq| {dq_scale:.3g}) at run {run}"


@needs_cuda
@pytest.mark.parametrize("head_dim", [64, 128])
def test_cuda_training_step_captured_in_a_graph(head_dim):
    # A whole step (forward, backward) captured in a CUDA graph, as a training loop does: the
    # backward's workspace is allocated on the stream (no host sync, no legacy-stream work), and
    # replays on new inputs give the uncaptured call's gradients (dK and dV bit for bit; dQ's
    # atomic sums may differ in order).
    shape = (2, 300, 8, head_dim)
    q, k, v, dout = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))

    def step():
        out = tileattn.attention(q, k, v, causal=True)
        return (out,) + torch.autograd.grad(out, (q, k, v), dout)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm-up
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            captured = step()
        for _ in range(3):
            with torch.no_grad():
                for x in (q, k, v, dout):
                    x.copy_(torch.randn_like(x))
            graph.replay()
            got = [t.clone() for t in captured]
            want = step()
            torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
            torch.testing.assert_close(got[1], want[1], rtol=1e-2, atol=1e-2)
            for name, a, b in zip("kv", got[2:], want[2:]):
                assert torch.equal(a, b), f"d{name} of the replay differs from the uncaptured call's"
    torch.cuda.current_stream().wait_stream(stream)
