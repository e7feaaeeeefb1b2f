"""tileattn.jax: the custom_vjp under jit and grad, against the fp64 oracle and the direct calls."""
import numpy as np
import pytest

import tileattn

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import tileattn.jax as ta  # noqa: E402


def inputs(shape, dtype, seed=0):
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, seqlen_q, heads_q, head_dim))
    k, v = (rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)) for _ in range(2))
    dout = rng.standard_normal(q.shape)
    return [jnp.asarray(x, dtype=dtype) for x in (q, k, v, dout)]


def grads(options, q, k, v, dout):
    loss = lambda q, k, v: (ta.attention(q, k, v, **options).astype(jnp.float32) * dout.astype(jnp.float32)).sum()
    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)


@pytest.mark.parametrize("shape", [(2, 33, 65, 4, 2, 32), (1, 64, 17, 2, 2, 72)], ids=str)
@pytest.mark.parametrize("options", [{}, {"causal": True}, {"window": (20, 3), "softcap": 15.0, "scale": 0.2}],
                         ids=["full", "causal", "window_softcap_scale"])
def test_fp32_gradients_match_the_float64_oracle(shape, options):
    q, k, v, dout = inputs(shape, jnp.float32)
    out = jax.jit(lambda q, k, v: ta.attention(q, k, v, **options))(q, k, v)
    want_out = tileattn.reference(*(np.asarray(x, dtype=np.float64) for x in (q, k, v)), **options)
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=0, atol=2e-6)
    got = grads(options, q, k, v, dout)
    want = tileattn.reference_backward(*(np.asarray(x) for x in (dout, q, k, v)), **options)
    for name, g, w in zip("qkv", got, want):
        assert g.dtype == jnp.float32 and g.shape == w.shape, name
        np.testing.assert_allclose(np.asarray(g), w, rtol=0, atol=2e-5 * max(1.0, np.abs(w).max()), err_msg=name)


def test_bf16_gradients_are_the_direct_backward():
    # The plumbing adds nothing: the callbacks return exactly what the direct calls do.
    q, k, v, dout = inputs((2, 40, 40, 4, 1, 64), jnp.bfloat16, seed=3)
    got = grads({"causal": True}, q, k, v, dout)
    host = [np.asarray(x) for x in (q, k, v, dout)]
    out, lse = tileattn.attention(*host[:3], causal=True, return_lse=True)
    want = tileattn.attention_backward(host[3], *host[:3], out, lse, causal=True)
    for name, g, w in zip("qkv", got, want):
        assert g.dtype == jnp.bfloat16, name
        np.testing.assert_array_equal(np.asarray(g).view(np.uint16), np.asarray(w).view(np.uint16), err_msg=name)


def test_shapes_are_checked_at_trace_time():
    q, k, v, _ = inputs((1, 8, 8, 4, 3, 16), jnp.float32)
    with pytest.raises(ValueError, match="k: 3 heads do not divide q's 4"):
        jax.jit(lambda q, k, v: ta.attention(q, k, v))(q, k, v)
    with pytest.raises(ValueError, match="q: rank 3"):
        ta.attention(q[0], k, v)
    with pytest.raises(ValueError, match="window"):
        ta.attention(q, k, v, window=(1, 2, 3))
