"""Bad input raises TypeError or ValueError naming the argument (never a crash), and what
tileattn does not implement raises NotImplementedError saying what."""

import numpy as np
import pytest

import tileattn


def qkv(seqlen_q=8, seqlen_k=8, heads_q=4, heads_kv=2, head_dim=16, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((2, seqlen_q, heads_q, head_dim)).astype(dtype),
        rng.standard_normal((2, seqlen_k, heads_kv, head_dim)).astype(dtype),
        rng.standard_normal((2, seqlen_k, heads_kv, head_dim)).astype(dtype),
    )


Q, K, V = qkv()


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        # Not arrays, or arrays of different kinds.
        (([[1.0]], K, V), {}, TypeError, r"^q: got a list, which is not an array"),
        ((Q, "k", V), {}, TypeError, r"^k: got a str"),
        ((Q, K, None), {}, TypeError, r"^v: got a NoneType"),
        ((Q, K, memoryview(V)), {}, TypeError, r"^v: got a memoryview"),
        # dtypes.
        ((Q.astype(np.float64), K, V), {}, TypeError, r"^q: dtype float64 is not supported"),
        ((Q.astype(np.int32), K, V), {}, TypeError, r"^q: dtype int32 is not supported"),
        ((Q, K.astype(np.float16), V), {}, TypeError, r"^k: dtype fp16 differs from q's fp32"),
        ((Q, K, V.astype(np.float16)), {}, TypeError, r"^v: dtype fp16 differs from q's fp32"),
        (
            (Q, K, V.astype(">f4")),
            {},
            TypeError,
            r"^v: dtype >f4 is not in the machine's byte order",
        ),
        # Shapes.
        ((Q[0], K, V), {}, ValueError, r"^q: rank 3 \(shape \(8, 4, 16\)\), expected 4 dims"),
        ((Q, K[0], V), {}, ValueError, r"^k: rank 3 \(shape \[8, 2, 16\]\)"),
        (
            (Q, K[:1], V[:1]),
            {},
            ValueError,
            r"^k: shape \[1, 8, 2, 16\]: batch \(dim 0\) is 1, expected 2",
        ),
        (
            (Q, K[..., :8], V[..., :8]),
            {},
            ValueError,
            r"^k: .*head_dim \(dim 3\) is 8, expected 16",
        ),
        ((Q, K, V[:, :5]), {}, ValueError, r"^v: .*seqlen \(dim 1\) is 5, expected 8 as in k"),
        (
            (Q[:, :, :3], K, V),
            {},
            ValueError,
            r"^k: heads \(dim 2\) is 2, which does not divide the query heads 3",
        ),
        ((Q[..., ::-1], K, V), {}, ValueError, r"^q: stride -1 in dim 3 is negative"),
        # Options: types.
        ((Q, K, V), {"causal": "yes"}, TypeError, r"^causal: expected a bool, got str 'yes'"),
        ((Q, K, V), {"causal": 2}, TypeError, r"^causal: expected a bool"),
        ((Q, K, V), {"scale": "0.1"}, TypeError, r"^scale: expected a float or None, got str"),
        ((Q, K, V), {"scale": True}, TypeError, r"^scale: expected a float or None, got bool"),
        (
            (Q, K, V),
            {"window": 4},
            TypeError,
            r"^window: expected a pair \(left, right\) of ints, got 4",
        ),
        ((Q, K, V), {"window": (1, 2, 3)}, TypeError, r"^window: expected a pair"),
        ((Q, K, V), {"window": (1.5, 2)}, TypeError, r"^window: expected a pair"),
        ((Q, K, V), {"softcap": None}, TypeError, r"^softcap: expected a float, got NoneType"),
        # Options: values.
        ((Q, K, V), {"scale": float("inf")}, ValueError, r"^scale: inf is not finite"),
        ((Q, K, V), {"scale": float("nan")}, ValueError, r"^scale: nan is not finite"),
        ((Q, K, V), {"softcap": -1.0}, ValueError, r"^softcap: -1, expected a finite value >= 0"),
        ((Q, K, V), {"window": (-2, 0)}, ValueError, r"^window\[0\]: -2, expected >= 0 or -1"),
        ((Q, K, V), {"window": (0, -7)}, ValueError, r"^window\[1\]: -7, expected >= 0 or -1"),
        ((Q, K, V), {"window": (0, 2**63)}, ValueError, r"^window\[1\]: 9223372036854775808 does not fit"),
        ((Q, K, V), {"scale": 1e300}, ValueError, r"^scale: 1e\+300 overflows float32"),
        (
            (Q, K, V),
            {"causal": True, "window": (4, 3)},
            ValueError,
            r"^window\[1\]: 3 conflicts with causal",
        ),
    ],
)
def test_bad_input_names_the_argument(args, kwargs, error, match):
    with pytest.raises(error, match=match) as info:
        tileattn.attention(*args, **kwargs)
    assert info.value.argument == match[1:].split(":")[0].replace("\\", "")


@pytest.mark.parametrize("function", [tileattn.eager, tileattn.reference])
def test_other_entry_points_check_too(function):
    with pytest.raises(ValueError, match=r"^k: .*batch \(dim 0\) is 1"):
        function(Q, K[:1], V[:1])
    with pytest.raises(TypeError, match=r"^window: expected a pair"):
        function(Q, K, V, window=None)


def test_head_dim_over_the_cpu_limit():
    q, k, v = qkv(seqlen_q=2, seqlen_k=2, heads_q=1, heads_kv=1, head_dim=513)
    with pytest.raises(ValueError, match=r"^q: head_dim 513 exceeds the CPU limit of 512"):
        tileattn.attention(q, k, v)


def test_bfloat16_mixed_with_float32():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match=r"^k: dtype fp32 differs from q's bf16"):
        tileattn.attention(Q.astype(ml_dtypes.bfloat16), K, V.astype(ml_dtypes.bfloat16))


def test_nothing_written_and_no_state_left_after_an_error():
    with pytest.raises(ValueError):
        tileattn.attention(Q, K, V, window=(-3, 0))
    np.testing.assert_array_equal(tileattn.attention(Q, K, V), tileattn.attention(Q, K, V))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dropout_p": 0.1}, r"dropout_p=0.1: tileattn has no dropout"),
        # flash-attn 3's order put positionally: softmax_scale lands in dropout_p.
        ({"dropout_p": None}, r"dropout_p=None: .*flash-attn 3's order, pass softmax_scale= and causal= by keyword"),
        ({"alibi_slopes": np.ones((4,), np.float32)}, r"alibi_slopes: tileattn has no ALiBi"),
        ({"qv": np.ones((1,), np.float32)}, r"^qv=numpy.ndarray: tileattn does not support it"),
        ({"attention_chunk": 64}, r"^attention_chunk=64: tileattn does not support it; pass attention_chunk=0"),
        ({"sm_margin": 8}, r"^sm_margin=8: "),
    ],
)
def test_flash_attn_func_not_implemented(kwargs, match):
    with pytest.raises(NotImplementedError, match=match):
        tileattn.flash_attn_func(Q, K, V, **kwargs)


def test_flash_attn_func_takes_flash_attn_3s_keywords_and_returns_the_lse():
    out = tileattn.flash_attn_func(Q, K, V, causal=True, num_splits=2, pack_gqa=True)
    np.testing.assert_allclose(out, tileattn.attention(Q, K, V, causal=True), atol=1e-6, rtol=0)
    np.testing.assert_array_equal(tileattn.flash_attn_func(Q, K, V, np.float32(0.0)), tileattn.attention(Q, K, V))
    out, lse, probs = tileattn.flash_attn_func(Q, K, V, softmax_scale=0.3, return_attn_probs=True)
    want_out, want_lse = tileattn.attention(Q, K, V, scale=0.3, return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    assert probs is None


def test_flash_attn_func_names_its_own_arguments():
    with pytest.raises(TypeError, match=r"^softmax_scale: expected a float or None, got str"):
        tileattn.flash_attn_func(Q, K, V, softmax_scale="x")
    with pytest.raises(ValueError, match=r"^softmax_scale: nan is not finite"):
        tileattn.flash_attn_func(Q, K, V, softmax_scale=float("nan"))
    with pytest.raises(ValueError, match=r"^window_size\[0\]: -4, expected >= 0 or -1"):
        tileattn.flash_attn_func(Q, K, V, window_size=(-4, -1))
    with pytest.raises(TypeError, match=r"^window_size: expected a pair"):
        tileattn.flash_attn_func(Q, K, V, window_size=None)
    with pytest.raises(ValueError, match=r"^k: "):
        tileattn.flash_attn_func(Q, K[:1], V[:1])
