"""Array frameworks: recognise an argument's kind, allocate outputs of the same kind, find streams.

The compiled core reads every array through DLPack and allocates nothing. This module gives it
outputs made by the caller's own framework (NumPy, PyTorch, CuPy), so the result is an array of
the same kind on the same device, owned by that framework. Other DLPack producers (JAX, ...) get
their output made by a framework that can allocate on their device and converted back through
their ``from_dlpack``.
"""

import sys

import numpy as np

# dtype names accepted per entry point; everything else is a TypeError naming the argument.
WORKING_DTYPES = ("float32", "float16", "bfloat16")
REFERENCE_DTYPES = WORKING_DTYPES + ("float64",)

_DLPACK_CPU, _DLPACK_CUDA = 1, 2


def argument_error(cls, argument, message):
    """A TypeError/ValueError reading "argument: message", with the argument as an attribute
    (the same shape as the errors the compiled core raises)."""
    error = cls(f"{argument}: {message}")
    error.argument = argument
    return error


def _module_root(x):
    return type(x).__module__.partition(".")[0]


def type_name(x):
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def kind_of(x, name):
    """'numpy', 'torch', 'cupy' or 'dlpack' (any other producer); TypeError for non-arrays."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if _module_root(x) == "torch" and hasattr(x, "data_ptr"):  # before sys.modules: torch.compile traces this function
        return "torch"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    if _module_root(x) == "cupy" and hasattr(x, "__dlpack__"):
        return "cupy"
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return "dlpack"
    raise argument_error(
        TypeError,
        name,
        f"got a {type_name(x)}, which is not an array (expected a NumPy array, a torch tensor or "
        "any array with __dlpack__: CuPy, JAX, ...)",
    )


def dtype_name(x, kind):
    """The dtype as NumPy spells it: 'float32', 'float16', 'bfloat16', ..."""
    if kind == "torch":
        return str(x.dtype).removeprefix("torch.")
    dtype = getattr(x, "dtype", None)
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def dtype_name_of(dtype):
    """A dtype given as a string, a NumPy dtype or a torch dtype, as NumPy spells it."""
    if isinstance(dtype, str):
        return dtype
    text = str(dtype)
    if text.startswith("torch."):
        return text.removeprefix("torch.")
    try:
        return np.dtype(dtype).name
    except TypeError:
        return text


def check_dtype(x, kind, name, allowed):
    dtype = dtype_name(x, kind)
    if dtype not in allowed:
        raise argument_error(
            TypeError, name, f"dtype {dtype} is not supported; expected {', '.join(allowed)}"
        )
    if kind in ("numpy", "cupy") and not x.dtype.isnative:
        raise argument_error(
            TypeError, name, f"dtype {x.dtype.str} is not in the machine's byte order"
        )


def device_of(x, kind):
    """(DLPack device type, index) of an array."""
    if kind == "numpy":
        return (_DLPACK_CPU, 0)
    if kind == "torch":
        d = x.device
        if d.type == "cuda":
            return (_DLPACK_CUDA, d.index if d.index is not None else 0)
        return (_DLPACK_CPU, 0) if d.type == "cpu" else (-1, 0)
    device_type, index = x.__dlpack_device__()
    return (int(device_type), int(index))


class Outputs:
    """Allocates the outputs of one call in q's framework and runs the call on q's stream.

    Use as a context manager around the call into the core: it makes q's device current. Arrays
    handed to the core go through ``core()``: NumPy bfloat16 (ml_dtypes) has no DLPack code, so
    such arrays travel as uint16 views and ``u16_is_bf16`` tells the core so.
    """

    def __init__(self, q, kind):
        self.q = q
        self.kind = kind
        self.device = device_of(q, kind)
        self.u16_is_bf16 = False
        self._context = None
        # A framework other than NumPy/torch/CuPy gets its outputs made by a carrier framework
        # on the same device and converted back with its own from_dlpack afterwards.
        self.carrier = kind
        if kind == "dlpack":
            if hasattr(q, "block_until_ready"):  # JAX computes asynchronously
                q.block_until_ready()
            self.carrier = "numpy" if self.device[0] == _DLPACK_CPU else _cuda_carrier(q)

    # -- allocation ----------------------------------------------------------------------------
    def empty(self, shape, dtype=None):
        """A new array of q's kind and device; dtype None means q's dtype, else a NumPy name."""
        shape = tuple(int(s) for s in shape)
        if self.carrier == "numpy":
            np_dtype = np.dtype(self.q.dtype) if dtype is None else np.dtype(dtype)
            return np.empty(shape, dtype=np_dtype)
        if self.carrier == "torch":
            import torch

            if dtype is None:
                t_dtype = (
                    self.q.dtype
                    if self.kind == "torch"
                    else _torch_dtype(dtype_name(self.q, self.kind))
                )
            else:
                t_dtype = getattr(torch, dtype)
            device = self.q.device if self.kind == "torch" else torch.device("cuda", self.device[1])
            return torch.empty(shape, dtype=t_dtype, device=device)
        import cupy

        with cupy.cuda.Device(self.device[1]):
            return cupy.empty(
                shape, dtype=np.dtype(self.q.dtype) if dtype is None else np.dtype(dtype)
            )

    def core(self, x):
        """The object to pass to the compiled core for array x."""
        if x is None:
            return None
        if self.kind == "torch" and x.requires_grad:
            return x.detach()  # DLPack refuses tensors that require grad; nothing is copied
        if self._numpy_like(x) and x.dtype.name == "bfloat16":
            self.u16_is_bf16 = True
            return x.view(np.uint16)
        return x

    def _numpy_like(self, x):
        return isinstance(x, np.ndarray) or _module_root(x) == "cupy"

    # -- device and stream ---------------------------------------------------------------------
    def __enter__(self):
        if self.device[0] == _DLPACK_CUDA:
            if self.carrier == "torch":
                import torch

                self._context = torch.cuda.device(self.device[1])
            elif self.carrier == "cupy":
                import cupy

                self._context = cupy.cuda.Device(self.device[1])
        if self._context is not None:
            self._context.__enter__()
        return self

    def __exit__(self, *exc):
        if self._context is not None:
            self._context.__exit__(*exc)
        return False

    def stream(self):
        """The CUDA stream (an integer cudaStream_t) q's framework is working on; 0 on the CPU."""
        if self.device[0] != _DLPACK_CUDA:
            return 0
        if self.carrier == "torch":
            import torch

            return torch.cuda.current_stream(self.device[1]).cuda_stream
        if self.carrier == "cupy":
            import cupy

            return cupy.cuda.get_current_stream().ptr
        return 0

    # -- results -------------------------------------------------------------------------------
    def result(self, x):
        """x as an array of q's kind (converted back from the carrier when they differ)."""
        if self.kind != "dlpack":
            return x
        if self.device[0] == _DLPACK_CUDA:
            _synchronize(self.carrier, self.device[1])  # the consumer does not know our stream
        namespace = getattr(self.q, "__array_namespace__", None)
        if namespace is None:
            return x
        xp = namespace()
        # NumPy cannot export bfloat16 through DLPack; asarray takes it through the buffer.
        return xp.asarray(x) if self.carrier == "numpy" else xp.from_dlpack(x)


def _torch_dtype(name):
    import torch

    return getattr(torch, name)


def _cuda_carrier(q):
    """A framework that can allocate CUDA memory for a CUDA array of another framework."""
    wants_bf16 = dtype_name(q, "dlpack") == "bfloat16"
    for name in ("torch", "cupy") if wants_bf16 else ("cupy", "torch"):
        try:
            __import__(name)
        except ImportError:
            continue
        return name
    raise argument_error(
        TypeError, "q", f"a {type_name(q)} on CUDA needs CuPy or PyTorch to allocate the output"
    )


def _synchronize(carrier, index):
    if carrier == "torch":
        import torch

        torch.cuda.current_stream(index).synchronize()
    elif carrier == "cupy":
        import cupy

        with cupy.cuda.Device(index):
            cupy.cuda.get_current_stream().synchronize()
