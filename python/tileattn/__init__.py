"""tileattn: exact attention, tiled (FlashAttention tiling + online softmax), on CPUs and GPUs.

    import numpy as np, tileattn
    q = np.random.randn(2, 128, 8, 64).astype(np.float32)    # [batch, seqlen, heads, head_dim]
    k = v = np.random.randn(2, 128, 2, 64).astype(np.float32)
    out = tileattn.attention(q, k, v, causal=True)            # NumPy in, NumPy out

Arrays of any framework that speaks DLPack work (NumPy, PyTorch, CuPy, JAX), on the CPU or a
CUDA GPU; the result is an array of q's kind on q's device. See :func:`attention`.
"""

from . import _C
from ._api import attention, eager, flash_attn_func, reference
from ._backward import attention_backward, attention_varlen_backward, eager_backward, reference_backward
from ._kvcache import flash_attn_with_kvcache
from ._packed import (
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)
from ._varlen import attention_varlen, flash_attn_combine, flash_attn_varlen_func, reference_varlen

__version__ = _C.version()


def built_with_cuda():
    """Whether this build of tileattn has its CUDA kernels."""
    return _C.built_with_cuda()


def built_with_cuda_backward():
    """Whether this build has the CUDA backward kernels (a build option, off by default until they
    are verified on a GPU); without them the backward runs on CPU tensors only."""
    return _C.built_with_cuda_backward()


def cuda_device_count():
    """The number of CUDA devices tileattn can use (0 without CUDA kernels or without a GPU)."""
    return _C.cuda_device_count()


def cpu_isa():
    """The SIMD level the CPU kernels run at on this machine: 'amx' (AVX512-BF16 with the bf16
    GEMMs on AMX tiles), 'avx512bf16' (AVX-512 with its bf16 dot products), 'avx512', 'avx2'
    or 'generic'."""
    return _C.cpu_isa()


def __getattr__(name):
    # `tileattn.torch` imports torch, so it is loaded on first use rather than with tileattn.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "attention",
    "eager",
    "reference",
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "attention_varlen",
    "reference_varlen",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_combine",
    "flash_attn_with_kvcache",
    "attention_backward",
    "attention_varlen_backward",
    "reference_backward",
    "eager_backward",
    "built_with_cuda",
    "built_with_cuda_backward",
    "cuda_device_count",
    "cpu_isa",
    "__version__",
]
