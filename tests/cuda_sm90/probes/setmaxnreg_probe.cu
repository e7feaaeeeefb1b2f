// setmaxnreg_probe.cu: does ptxas give code after setmaxnreg.inc the registers it asks for?
// A 384-thread kernel (launch share 168 registers): warpgroup 0 gives registers back and
// returns, the other two raise theirs to 240 and keep NN accumulators live across a loop.
// scripts/setmaxnreg_probe.sh compiles it at several NN, with and without the setmaxnreg pair,
// and prints ptxas's spills (docs/kernels/sm90_backward.md, "Registers").
#ifndef NN
#define NN 200
#endif

template <int N>
__device__ __forceinline__ void raise_regs() {
#if defined(WITH_SETMAXNREG)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void lower_regs() {
#if defined(WITH_SETMAXNREG)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
#endif
}

__global__ void __launch_bounds__(384, 1) probe(const float* __restrict__ in, float* out, int iters) {
  if (threadIdx.x < 128) {  // the "producer": registers back, nothing to do
    lower_regs<24>();
    if (threadIdx.x == 0) out[0] = in[0];
    return;
  }
  raise_regs<240>();
  float acc[NN];
#pragma unroll
  for (int i = 0; i < NN; ++i) acc[i] = in[threadIdx.x * NN + i];
  for (int it = 0; it < iters; ++it) {
    const float x = in[it], y = in[it + 1];
#pragma unroll
    for (int i = 0; i < NN; ++i) acc[i] = fmaf(acc[i], x, y);
  }
#pragma unroll
  for (int i = 0; i < NN; ++i) out[threadIdx.x * NN + i] = acc[i];
}
