"""tileattn.attention on NumPy arrays (CPU) against the float64 NumPy reference of this folder.

The accuracy rule (FlashAttention's): err(tileattn) <= 2 * err(eager in the same dtype) +
rounding_atol, both measured against float64, for out and for lse.
"""

import numpy as np
import pytest

import numpy_reference
import tileattn

try:  # NumPy's bfloat16 comes from ml_dtypes (a test dependency); without it bf16 cases skip
    import ml_dtypes

    BFLOAT16 = ml_dtypes.bfloat16
except ImportError:
    BFLOAT16 = None

DTYPE_NAMES = ["float32", "float16", "bfloat16"]


def dtype_of(name):
    if name == "bfloat16" and BFLOAT16 is None:
        pytest.skip("bfloat16 NumPy arrays need ml_dtypes")
    return {"float32": np.float32, "float16": np.float16, "bfloat16": BFLOAT16}[name]


def make(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


def make_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype=np.float32, seed=0):
    return (
        make((batch, seqlen_q, heads_q, head_dim), dtype, seed),
        make((batch, seqlen_k, heads_kv, head_dim), dtype, seed + 1),
        make((batch, seqlen_k, heads_kv, head_dim), dtype, seed + 2),
    )


def max_err(x, ref):
    x = np.asarray(x).astype(np.float64)
    both_inf = np.isinf(x) & np.isinf(ref) & (np.sign(x) == np.sign(ref))
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf: masked below
        return float(np.max(np.where(both_inf, 0.0, np.abs(x - ref)), initial=0.0))


def check_against_reference(q, k, v, **options):
    """Runs tileattn and eager, checks both outputs and lse against the NumPy reference."""
    out, lse = tileattn.attention(q, k, v, return_lse=True, **options)
    eager_out, eager_lse = tileattn.eager(q, k, v, return_lse=True, **options)
    ref_out, ref_lse = numpy_reference.attention(q, k, v, **options)

    assert type(out) is np.ndarray and out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert not np.isnan(out.astype(np.float32)).any()
    # Rows that see nothing: out exactly 0, lse -inf, in both.
    empty_rows = np.isneginf(ref_lse)
    np.testing.assert_array_equal(np.isneginf(lse), empty_rows)
    assert np.all(out.astype(np.float32).transpose(0, 2, 1, 3)[empty_rows] == 0)

    atol = numpy_reference.rounding_atol(ref_out, q.dtype)
    assert max_err(out, ref_out) <= 2 * max_err(eager_out, ref_out) + atol
    # lse is float32 and goes through base 2 (m * log2(e) + log2(l), then * ln(2)): a few ulp of
    # its size, whatever the input dtype.
    lse_size = np.max(np.abs(ref_lse[np.isfinite(ref_lse)]), initial=1.0)
    lse_atol = 4 * np.finfo(np.float32).eps * max(1.0, lse_size)
    assert max_err(lse, ref_lse) <= 2 * max_err(eager_lse, ref_lse) + lse_atol
    return out, lse


@pytest.mark.parametrize("head_dim", [16, 40, 64, 111])
@pytest.mark.parametrize(
    "seqlen_q, seqlen_k", [(1, 1), (1, 203), (17, 65), (65, 17), (203, 203), (203, 1)]
)
@pytest.mark.parametrize("causal", [False, True])
def test_odd_shapes(seqlen_q, seqlen_k, head_dim, causal):
    q, k, v = make_qkv(2, seqlen_q, seqlen_k, 3, 3, head_dim)
    check_against_reference(q, k, v, causal=causal)


@pytest.mark.parametrize("heads_q, heads_kv", [(8, 8), (8, 2), (6, 1), (4, 2)])
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_gqa(heads_q, heads_kv, dtype):
    q, k, v = make_qkv(2, 33, 47, heads_q, heads_kv, 64, dtype_of(dtype))
    check_against_reference(q, k, v, causal=True)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(65, 65), (17, 203), (203, 17)])
@pytest.mark.parametrize("causal", [False, True])
def test_dtypes(dtype, seqlen_q, seqlen_k, causal):
    q, k, v = make_qkv(1, seqlen_q, seqlen_k, 4, 2, 40, dtype_of(dtype), seed=3)
    out, _ = check_against_reference(q, k, v, causal=causal)
    assert out.dtype == np.dtype(dtype_of(dtype))


@pytest.mark.parametrize(
    "window, causal",
    [
        ((0, 0), False),  # each query sees one key (the diagonal)
        ((3, -1), False),
        ((-1, 2), False),
        ((5, 5), False),
        ((8, -1), True),
        ((8, 0), True),
        ((0, -1), True),
        ((40, 7), False),
    ],
)
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(65, 65), (17, 65), (65, 17)])
def test_windows(window, causal, seqlen_q, seqlen_k):
    q, k, v = make_qkv(2, seqlen_q, seqlen_k, 4, 2, 16, seed=5)
    check_against_reference(q, k, v, causal=causal, window=window)


def test_rows_that_see_nothing():
    # Causal with Lq > Lk, bottom-right aligned: the first Lq - Lk queries see no key.
    q, k, v = make_qkv(1, 20, 5, 2, 2, 16)
    out, lse = tileattn.attention(q, k, v, causal=True, return_lse=True)
    assert np.all(out[:, :15] == 0) and np.all(np.isneginf(lse[:, :, :15]))
    assert np.all(np.isfinite(lse[:, :, 15:])) and np.any(out[:, 15:] != 0)
    # No keys at all: every row sees nothing.
    empty = np.zeros((1, 0, 2, 16), np.float32)
    out, lse = tileattn.attention(q, empty, empty, return_lse=True)
    assert np.all(out == 0) and np.all(np.isneginf(lse))


@pytest.mark.parametrize("softcap", [0.5, 5.0, 30.0])
@pytest.mark.parametrize("scale", [None, 0.05, 1.0])
def test_softcap_and_scale(softcap, scale):
    q, k, v = make_qkv(2, 29, 71, 4, 4, 64, seed=7)
    q = q * 3.0  # large scores, so the cap matters
    check_against_reference(q, k, v, softcap=softcap, scale=scale)


def test_strided_views():
    # [B, H, L, D] storage passed as [B, L, H, D] views, and slices: nothing is copied.
    qt = make((2, 4, 37, 64), seed=11)
    kt = make((2, 2, 90, 64), seed=12)
    vt = make((2, 2, 90, 64), seed=13)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qt, kt, vt))
    assert not q.flags.c_contiguous
    check_against_reference(q, k, v, causal=True)
    # Every other key, a subset of heads, a head_dim slice of wider rows.
    check_against_reference(q[:, 1:], k[:, ::2], v[:, ::2])
    check_against_reference(q[:, :, ::2], k[:, :, :1], v[:, :, 1:])
    wide = make((1, 31, 2, 128), seed=14)
    check_against_reference(wide[..., :40], wide[..., 40:80], wide[..., 80:120])
    # A broadcast (stride 0, read-only) key/value.
    k1 = np.broadcast_to(make((2, 90, 1, 64), seed=15), (2, 90, 2, 64))
    assert not k1.flags.writeable
    check_against_reference(q, k1, k1)


def test_inputs_unchanged_and_output_fresh():
    q, k, v = make_qkv(1, 9, 9, 2, 2, 16)
    copies = [x.copy() for x in (q, k, v)]
    out = tileattn.attention(q, k, v)
    for x, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(x, c)
    assert out.flags.c_contiguous and out.flags.writeable and out.base is None


def test_nan_propagates():
    q, k, v = make_qkv(1, 8, 8, 2, 2, 16)
    q[0, 3, 1, 5] = np.nan
    out = tileattn.attention(q, k, v)
    assert np.isnan(out[0, 3, 1]).all()
    out[0, 3, 1] = 0
    assert not np.isnan(out).any()


def test_empty_batch_and_queries():
    q, k, v = make_qkv(2, 5, 7, 2, 2, 16)
    assert tileattn.attention(q[:0], k[:0], v[:0]).shape == (0, 5, 2, 16)
    out, lse = tileattn.attention(q[:, :0], k, v, return_lse=True)
    assert out.shape == (2, 0, 2, 16) and lse.shape == (2, 2, 0)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_reference_is_float64_and_matches_numpy(dtype):
    q, k, v = make_qkv(2, 23, 41, 4, 2, 40, dtype_of(dtype), seed=21)
    # scale and softcap travel as float32: exact values keep the comparison at 1e-12.
    options = dict(causal=True, window=(9, -1), softcap=4.0, scale=0.25)
    out, lse = tileattn.reference(q, k, v, return_lse=True, **options)
    assert out.dtype == np.float64 and lse.dtype == np.float64
    ref_out, ref_lse = numpy_reference.attention(q, k, v, **options)
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lse, ref_lse, rtol=0, atol=1e-12)
    # float64 inputs are accepted by the oracle only.
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    np.testing.assert_allclose(tileattn.reference(q64, k64, v64, **options), ref_out, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_eager_keeps_dtype(dtype):
    q, k, v = make_qkv(1, 12, 12, 2, 2, 16, dtype_of(dtype))
    out, lse = tileattn.eager(q, k, v, return_lse=True)
    assert out.dtype == q.dtype and lse.dtype == np.float32


def test_flash_attn_func_matches_attention():
    q, k, v = make_qkv(2, 40, 40, 4, 2, 64, np.float16, seed=31)
    np.testing.assert_array_equal(tileattn.flash_attn_func(q, k, v), tileattn.attention(q, k, v))
    got = tileattn.flash_attn_func(
        q, k, v, softmax_scale=0.1, causal=True, window_size=(6, 6), softcap=2.0, deterministic=True
    )
    # flash-attn sets the right window to 0 when causal.
    want = tileattn.attention(q, k, v, scale=0.1, causal=True, window=(6, 0), softcap=2.0)
    np.testing.assert_array_equal(got, want)


def test_lists_of_ints_and_numpy_scalars_as_options():
    q, k, v = make_qkv(1, 10, 10, 2, 2, 16)
    a = tileattn.attention(q, k, v, window=[np.int64(3), 0], scale=np.float32(0.5), causal=np.True_)
    b = tileattn.attention(q, k, v, window=(3, 0), scale=0.5, causal=True)
    np.testing.assert_array_equal(a, b)


def test_version_and_build_info():
    from importlib.metadata import version

    assert tileattn.__version__ == version("tileattn")
    assert isinstance(tileattn.built_with_cuda(), bool)
    assert tileattn.cuda_device_count() >= 0
    if not tileattn.built_with_cuda():
        assert tileattn.cuda_device_count() == 0
    assert tileattn.cpu_isa() in ("amx", "avx512bf16", "avx512", "avx2", "generic")


def test_threads_run_concurrently_and_agree():
    # The core runs without the GIL; results do not depend on who else is running.
    from concurrent.futures import ThreadPoolExecutor

    q, k, v = make_qkv(2, 64, 64, 4, 4, 64)
    want = tileattn.attention(q, k, v, causal=True)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: tileattn.attention(q, k, v, causal=True), range(8)))
    for got in results:
        np.testing.assert_array_equal(got, want)
