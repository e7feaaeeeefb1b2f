// simd.cc: picks the SIMD table for this CPU once per process.
#include "simd/simd.h"

#include <cstdlib>
#include <cstring>

#if defined(TILEATTN_GEMM_AMX)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tileattn::detail {
namespace avx512 {
extern const SimdKernels kKernels;
}
namespace avx2 {
extern const SimdKernels kKernels;
}
#if defined(TILEATTN_GEMM_BF16)
namespace avx512bf16 {
void gemm_bf16(int64_t M, int64_t N, int64_t K2, const uint32_t* A, int64_t rsa, int64_t csa,
               const uint32_t* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);
void exp2_pairs_cols(const float* x, int64_t rows, int64_t ld, int64_t n, float mul, const float* base,
                     float* sums, uint32_t* dst, int64_t ldd);
}  // namespace avx512bf16
#endif
#if defined(TILEATTN_GEMM_AMX)
namespace amx {
void gemm_bf16(int64_t M, int64_t N, int64_t K2, const uint32_t* A, int64_t rsa, int64_t csa,
               const uint32_t* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);
}
#endif
namespace generic {
extern const SimdKernels kKernels;
}

namespace {

#if defined(TILEATTN_GEMM_AMX)
// AMX-TILE and AMX-BF16 (CPUID leaf 7, EDX bits 24 and 22; read directly: not every compiler's
// __builtin_cpu_supports knows them), and the tile data, off until the process asks Linux for
// it (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18): once, granted or not for good.
bool amx_granted() {
  static const bool granted = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) return false;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return granted;
}
#endif

bool cpu_has(const char* isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#if defined(TILEATTN_GEMM_AMX)
  if (!std::strcmp(isa, "amx")) return cpu_has("avx512bf16") && amx_granted();
#endif
#if defined(TILEATTN_GEMM_BF16)
  if (!std::strcmp(isa, "avx512bf16")) return cpu_has("avx512") && __builtin_cpu_supports("avx512bf16");
#endif
  if (!std::strcmp(isa, "avx512"))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  if (!std::strcmp(isa, "avx2"))
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
  return !std::strcmp(isa, "generic");
}

const SimdKernels& pick() {
  // Best first; TILEATTN_CPU_ISA names the best level allowed (an unknown name allows all).
  const char* levels[] = {"amx", "avx512bf16", "avx512", "avx2", "generic"};
  const char* cap = std::getenv("TILEATTN_CPU_ISA");
  bool allowed = true;
  if (cap)
    for (const char* isa : levels) allowed = allowed && std::strcmp(cap, isa) != 0;
  for (const char* isa : levels) {
    allowed = allowed || (cap && std::strcmp(cap, isa) == 0);
    if (!allowed) continue;
    if (const SimdKernels* k = simd_for(isa)) return *k;
  }
  return generic::kKernels;
}

}  // namespace

const SimdKernels* simd_for(const char* isa) {
  if (!cpu_has(isa)) return nullptr;
#if defined(TILEATTN_GEMM_BF16)
  if (!std::strcmp(isa, "avx512bf16")) {  // avx512's table with the bf16 GEMM
    static const SimdKernels k = [] {
      SimdKernels t = avx512::kKernels;
      t.isa = "avx512bf16";
      t.gemm_bf16 = &avx512bf16::gemm_bf16;
      t.exp2_pairs_cols = &avx512bf16::exp2_pairs_cols;
      return t;
    }();
    return &k;
  }
#endif
#if defined(TILEATTN_GEMM_AMX)
  if (!std::strcmp(isa, "amx")) {  // avx512bf16's table with the bf16 GEMM on AMX tiles
    static const SimdKernels k = [] {
      SimdKernels t = *simd_for("avx512bf16");
      t.isa = "amx";
      t.amx = true;
      t.gemm_bf16 = &amx::gemm_bf16;
      return t;
    }();
    return &k;
  }
#endif
  if (!std::strcmp(isa, "avx512")) return &avx512::kKernels;
  if (!std::strcmp(isa, "avx2")) return &avx2::kKernels;
  if (!std::strcmp(isa, "generic")) return &generic::kKernels;
  return nullptr;
}

const SimdKernels& simd() {
  static const SimdKernels& k = pick();
  return k;
}

}  // namespace tileattn::detail
