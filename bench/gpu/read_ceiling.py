"""A plain read of a decode's K and V under the benchmarks' timer: the rate that no attention
kernel reading those bytes once can beat on this GPU under the same L2 flush (the decode
suite's "read_kv" row). One Triton kernel reads both tensors whole (16-byte loads, a float sum
per program, so the loads are not optimized away) and writes one float per program."""
import torch
import triton
import triton.language as tl

BLOCK = 4096  # elements a program reads per step
STEPS = 8  # steps a program takes: 64 KiB of bf16 a program


@triton.jit
def _read(k_ptr, v_ptr, n, out_ptr, programs_per_tensor, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    first = pid < programs_per_tensor
    ptr = tl.where(first, k_ptr, v_ptr)
    start = (pid % programs_per_tensor).to(tl.int64) * BLOCK * STEPS
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(STEPS):
        offs = start + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc))


def read_kv(q, k, v, causal):
    """The call that reads k and v (contiguous, same size) once: make(q, k, v, causal) of an Impl."""
    assert k.is_contiguous() and v.is_contiguous() and k.numel() == v.numel()
    n = k.numel()
    per_tensor = triton.cdiv(n, BLOCK * STEPS)
    out = torch.empty(2 * per_tensor, device=k.device, dtype=torch.float32)

    def call():
        _read[(2 * per_tensor,)](k, v, n, out, per_tensor, BLOCK=BLOCK, STEPS=STEPS)
        return out

    return call
