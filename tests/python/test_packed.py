"""flash-attn 2's packed entries (qkv and kv stacked in one array): the same results as the
unpacked calls on the same views, against the float64 oracle, gradients into the packed tensor,
and bad packed shapes named."""

import numpy as np
import pytest

import tileattn

LENS = [0, 1, 17, 63, 5]
LENS_K = [3, 0, 40, 63, 129]


def make(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def close_to_oracle(got, want, atol=2e-5):
    np.testing.assert_allclose(got.astype(np.float64), want, atol=atol, rtol=0)


def test_qkvpacked_is_the_unpacked_call():
    qkv = make((2, 37, 3, 4, 40), 0)
    options = dict(softmax_scale=0.3, causal=True, window_size=(9, 9), softcap=5.0)
    got = tileattn.flash_attn_qkvpacked_func(qkv, **options)
    want = tileattn.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], **options)
    np.testing.assert_array_equal(got, want)
    close_to_oracle(got, tileattn.reference(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], scale=0.3, causal=True,
                                            window=(9, 0), softcap=5.0))


def test_positional_arguments_in_flash_attn_2s_order():
    qkv = make((1, 20, 3, 2, 16), 8)
    got = tileattn.flash_attn_qkvpacked_func(qkv, 0.0, 0.3, True, (4, 4), 2.0)
    want = tileattn.flash_attn_qkvpacked_func(qkv, softmax_scale=0.3, causal=True, window_size=(4, 4), softcap=2.0)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, tileattn.flash_attn_qkvpacked_func(qkv))


@pytest.mark.parametrize("options", [{"causal": True}, {"softmax_scale": 0.2, "window_size": (7, 3), "softcap": 4.0}])
def test_kvpacked_with_gqa_and_lq_not_lk(options):
    q, kv = make((2, 17, 8, 64), 1), make((2, 65, 2, 2, 64), 2)
    got = tileattn.flash_attn_kvpacked_func(q, kv, **options)
    np.testing.assert_array_equal(got, tileattn.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], **options))
    assert not np.array_equal(got, tileattn.flash_attn_kvpacked_func(q, kv))
    oracle = dict(scale=options.get("softmax_scale"), causal=options.get("causal", False),
                  window=options.get("window_size", (-1, -1)), softcap=options.get("softcap", 0.0))
    if oracle["causal"]:
        oracle["window"] = (oracle["window"][0], 0)
    close_to_oracle(got, tileattn.reference(q, kv[:, :, 0], kv[:, :, 1], **oracle))


@pytest.mark.parametrize("options", [{"causal": True}, {"softmax_scale": 0.25, "window_size": (9, 2), "softcap": 3.0}])
def test_varlen_qkvpacked_matches_each_sequence(options):
    qkv = make((sum(LENS), 3, 4, 32), 3)
    got = tileattn.flash_attn_varlen_qkvpacked_func(qkv, cu(LENS), max(LENS), **options)
    assert got.shape == (sum(LENS), 4, 32)
    oracle = dict(scale=options.get("softmax_scale"), causal=options.get("causal", False),
                  window=options.get("window_size", (-1, -1)), softcap=options.get("softcap", 0.0))
    at = cu(LENS)
    for b, n in enumerate(LENS):
        if n == 0:
            continue
        s = qkv[at[b]:at[b] + n][None]
        close_to_oracle(got[at[b]:at[b] + n], tileattn.reference(s[:, :, 0], s[:, :, 1], s[:, :, 2], **oracle)[0])


def test_varlen_kvpacked_is_the_unpacked_call():
    q, kv = make((sum(LENS), 8, 48), 4), make((sum(LENS_K), 2, 2, 48), 5)
    args = (cu(LENS), cu(LENS_K), max(LENS), max(LENS_K))
    got = tileattn.flash_attn_varlen_kvpacked_func(q, kv, *args, softcap=3.0, window_size=(30, 2))
    want = tileattn.flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], *args, softcap=3.0, window_size=(30, 2),
                                           num_splits=0)
    np.testing.assert_array_equal(got, want)


def test_bad_packing_and_fa2_extras_name_themselves():
    with pytest.raises(ValueError, match=r"^qkv: shape \[2, 5, 2, 4, 8\]"):
        tileattn.flash_attn_qkvpacked_func(make((2, 5, 2, 4, 8), 6))
    with pytest.raises(ValueError, match=r"^kv: shape \[2, 5, 2, 8\]"):
        tileattn.flash_attn_kvpacked_func(make((2, 5, 4, 8), 6), make((2, 5, 2, 8), 7))
    with pytest.raises(ValueError, match=r"^qkv: "):
        tileattn.flash_attn_varlen_qkvpacked_func(make((9, 2, 4, 8), 6), cu([9]), 9)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        tileattn.flash_attn_qkvpacked_func(make((1, 4, 3, 2, 8), 6), dropout_p=0.1)
    with pytest.raises(TypeError, match="^kv"):
        tileattn.flash_attn_kvpacked_func(make((1, 4, 2, 8), 6), [[1.0]])
    # Errors about a slice name the packed array.
    with pytest.raises(ValueError, match=r"^kv: .*\(of k, its slice 0 along dim 2\)$"):
        tileattn.flash_attn_kvpacked_func(make((1, 4, 2, 64), 6), make((1, 5, 2, 2, 32), 7))
    with pytest.raises(TypeError, match=r"^qkv: .*float64.*\(of q, its slice 0 along dim 1\)$"):
        tileattn.flash_attn_varlen_qkvpacked_func(make((9, 3, 4, 8), 6, np.float64), cu([9]), 9)


def test_torch_gradients_reach_the_packed_tensor():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 33, 3, 4, 32, generator=g, dtype=torch.float64).float().requires_grad_()
    grad_out = torch.randn(2, 33, 4, 32, generator=g)
    (tileattn.flash_attn_qkvpacked_func(qkv, causal=True) * grad_out).sum().backward()
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    (tileattn.flash_attn_func(q, k, v, causal=True) * grad_out).sum().backward()
    want = torch.stack([q.grad, k.grad, v.grad], dim=2)
    torch.testing.assert_close(qkv.grad, want, rtol=0, atol=1e-6)
    assert float(qkv.grad.abs().max()) > 0


def test_torch_varlen_kvpacked_gradients():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1)
    q = torch.randn(sum(LENS), 4, 16, generator=g).requires_grad_()
    kv = torch.randn(sum(LENS_K), 2, 2, 16, generator=g).requires_grad_()
    args = (torch.tensor(cu(LENS)), torch.tensor(cu(LENS_K)), max(LENS), max(LENS_K))
    grad_out = torch.randn(sum(LENS), 4, 16, generator=g)
    (tileattn.flash_attn_varlen_kvpacked_func(q, kv, *args, causal=True) * grad_out).sum().backward()
    q2, k2, v2 = (x.detach().clone().requires_grad_() for x in (q, kv[:, 0], kv[:, 1]))
    (tileattn.flash_attn_varlen_func(q2, k2, v2, *args, causal=True, num_splits=0) * grad_out).sum().backward()
    torch.testing.assert_close(q.grad, q2.grad, rtol=0, atol=1e-6)
    torch.testing.assert_close(kv.grad, torch.stack([k2.grad, v2.grad], dim=1), rtol=0, atol=1e-6)
    assert float(kv.grad.abs().max()) > 0


def test_return_attn_probs_gives_flash_attn_2s_triple():
    # (out, softmax_lse, None): the LSE as the unpacked entries return it, no probabilities.
    qkv = make((2, 9, 3, 2, 8), 9)
    out, lse, probs = tileattn.flash_attn_qkvpacked_func(qkv, causal=True, return_attn_probs=True)
    want_out, want_lse = tileattn.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True, return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    assert probs is None
    q, kv = make((7, 2, 8), 10), make((7, 2, 2, 8), 11)
    out, lse, probs = tileattn.flash_attn_varlen_kvpacked_func(q, kv, cu([3, 4]), cu([3, 4]), 4, 4,
                                                              return_attn_probs=True)
    want_out, want_lse = tileattn.flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu([3, 4]), cu([3, 4]), 4, 4,
                                                         num_splits=0, return_attn_probs=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    assert lse.shape == (2, 7) and probs is None
