// tensor_map.cc: cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda).
#include "cuda/sm90/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.h"

namespace tileattn::detail::sm90 {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult query{};
    TILEATTN_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &query));
    if (query != cudaDriverEntryPointSuccess || ptr == nullptr)
      throw RuntimeError("cuTensorMapEncodeTiled is not available from this CUDA driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace

CUtensorMap make_tensor_map_16bit(const void* base, bool bf16, int rank, const uint64_t* dims,
                                  const uint64_t* byte_strides, const uint32_t* box, bool swizzle_128b) {
  CUtensorMap map{};
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult result = encode_fn()(
      &map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      static_cast<cuuint32_t>(rank), const_cast<void*>(base), reinterpret_cast<const cuuint64_t*>(dims),
      reinterpret_cast<const cuuint64_t*>(byte_strides), reinterpret_cast<const cuuint32_t*>(box),
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw RuntimeError("cuTensorMapEncodeTiled failed with CUresult " +
                       std::to_string(static_cast<int>(result)) + " (rank " + std::to_string(rank) +
                       ", dim0 " + std::to_string(dims[0]) + ", box0 " + std::to_string(box[0]) + ")");
  return map;
}

}  // namespace tileattn::detail::sm90
