"""Arrays of other DLPack frameworks: CuPy (CUDA) and JAX (CPU and CUDA). Each test skips itself
when its framework, a GPU or tileattn's CUDA kernels are missing."""

import numpy as np
import pytest

import numpy_reference
import tileattn


def make_qkv(seqlen_q=77, seqlen_k=130, heads_q=8, heads_kv=2, head_dim=64, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(2, seqlen_q, heads_q, head_dim)] + [(2, seqlen_k, heads_kv, head_dim)] * 2
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def check(out, q, k, v, dtype, causal):
    """out (as NumPy) is within the eager rule of the float64 reference."""
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    ref, _ = numpy_reference.attention(q, k, v, causal=causal)
    eager = tileattn.eager(q, k, v, causal=causal)  # on the CPU, in the same dtype
    err = np.abs(np.asarray(out, dtype=np.float64) - ref).max()
    eager_err = np.abs(eager.astype(np.float64) - ref).max()
    assert err <= 2 * eager_err + numpy_reference.rounding_atol(ref, dtype), (err, eager_err)


def gpu_ready():
    return tileattn.cuda_device_count() > 0


# -- CuPy -------------------------------------------------------------------------------------


@pytest.fixture
def cupy():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA GPU")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA GPU")
    if not gpu_ready():
        pytest.skip("tileattn built without its CUDA kernels")
    return cp


@pytest.mark.parametrize("dtype", [np.float16])  # CuPy has no bfloat16; CUDA takes 16-bit
@pytest.mark.parametrize("causal", [False, True])
def test_cupy(cupy, dtype, causal):
    q, k, v = make_qkv()
    qd, kd, vd = (cupy.asarray(x.astype(dtype)) for x in (q, k, v))
    out, lse = tileattn.attention(qd, kd, vd, causal=causal, return_lse=True)
    assert isinstance(out, cupy.ndarray) and out.dtype == dtype and out.shape == qd.shape
    assert isinstance(lse, cupy.ndarray) and lse.dtype == np.float32
    check(cupy.asnumpy(out), q, k, v, dtype, causal)
    # A [B, H, L, D] array passed as a strided [B, L, H, D] view.
    views = [
        cupy.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for x in (qd, kd, vd)
    ]
    cupy.testing.assert_array_equal(tileattn.attention(*views, causal=causal), out)


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}
"""


def test_cupy_runs_on_the_current_stream(cupy):
    q, k, v = (cupy.asarray(x.astype(np.float16)) for x in make_qkv())
    want = tileattn.attention(q, k, v)
    q_late = cupy.zeros_like(q)
    spin = cupy.RawKernel(SPIN, "spin")
    cupy.cuda.Device().synchronize()
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        spin((1,), (1,), (np.int64(200_000_000),))  # about 0.1 s, then q_late gets its values
        q_late[...] = q
        got = tileattn.attention(q_late, k, v)
    side.synchronize()
    cupy.testing.assert_array_equal(got, want)


# -- JAX --------------------------------------------------------------------------------------


@pytest.fixture
def jax():
    return pytest.importorskip("jax")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jax_cpu(jax, dtype):
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    q, k, v = make_qkv(seqlen_q=33, seqlen_k=33, heads_q=4, heads_kv=4, head_dim=32)
    qj, kj, vj = (jax.device_put(jnp.asarray(x, dtype=dtype), cpu) for x in (q, k, v))
    out = tileattn.attention(qj, kj, vj, causal=True)
    assert isinstance(out, jax.Array) and out.dtype == qj.dtype and out.shape == qj.shape
    np_dtype = np.dtype(qj.dtype)
    check(
        np.asarray(out).astype(np.float64),
        *(np.asarray(x).astype(np.float32) for x in (qj, kj, vj)),
        np_dtype,
        True,
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_jax_cuda(jax, dtype):
    import jax.numpy as jnp

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus or not gpu_ready():
        pytest.skip("needs JAX on a CUDA GPU and tileattn's CUDA kernels")
    q, k, v = make_qkv()
    qj, kj, vj = (jax.device_put(jnp.asarray(x, dtype=dtype), gpus[0]) for x in (q, k, v))
    out = tileattn.attention(qj, kj, vj, causal=True)
    assert isinstance(out, jax.Array) and out.dtype == qj.dtype
    assert list(out.devices())[0].platform == "gpu"
    np_dtype = np.dtype(qj.dtype)
    inputs = (np.asarray(x).astype(np.float32) for x in (qj, kj, vj))
    check(np.asarray(out).astype(np.float64), *inputs, np_dtype, True)
