// kvcache_append.cu: forward_kvcache on the device: the checked mode's index-value check (the
// host's function, common/kvcache_check.h), the append of k_new / v_new into the cache with
// rotary applied, q rotated into a workspace, each sequence's key count, then the forward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"

namespace tileattn::detail::cuda {
namespace {

// Elements read as double and written through fp32, exactly as the CPU path does
// (common/convert.h: load_as_double, store_from_double), so both round the same way.
__device__ double load_elem(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DType::kFloat16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DType::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      return 0.0;
  }
}

__device__ void store_elem(void* base, DType dtype, int64_t i, double x) {
  const float f = __double2float_rn(x);
  if (dtype == DType::kFloat16) static_cast<__half*>(base)[i] = __float2half_rn(f);
  if (dtype == DType::kBFloat16) static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(f);
}

// Dim d of row x (element offset x_off, head_dim stride 1) rotated at position pos: the pair
// (2i, 2i + 1) interleaved or (i, i + half) NeoX, x1 * c - x2 * s and x2 * c + x1 * s as the
// CPU computes them (explicit roundings: no contraction into an FMA, which the CPU does not do).
__device__ double rotated(const KvAppend& a, const void* x, DType dtype, int64_t x_off, int d, int64_t pos) {
  const double xd = load_elem(x, dtype, x_off + d);
  if (a.cos == nullptr || d >= 2 * a.half) return xd;
  const int half = static_cast<int>(a.half);
  const bool first = a.interleaved ? d % 2 == 0 : d < half;
  const int i = a.interleaved ? d / 2 : first ? d : d - half;
  const int partner = a.interleaved ? (first ? d + 1 : d - 1) : (first ? d + half : d - half);
  const double c = load_elem(a.cos, a.rotary_dtype, pos * a.cos_stride[0] + i * a.cos_stride[1]);
  const double s = load_elem(a.sin, a.rotary_dtype, pos * a.sin_stride[0] + i * a.sin_stride[1]);
  const double xp = load_elem(x, dtype, x_off + partner);
  return first ? __dsub_rn(__dmul_rn(xd, c), __dmul_rn(xp, s))
               : __dadd_rn(__dmul_rn(xd, c), __dmul_rn(xp, s));
}

// The sequence whose packed rows [cu[b], cu[b + 1]) hold row r: the last b with cu[b] <= r
// (empty sequences before it share its start). -1 when r lies past them all (bad indices).
__device__ int64_t sequence_of(const int32_t* cu, int64_t batch, int64_t r) {
  int64_t lo = 0, hi = batch;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo < batch && r < cu[lo + 1] ? lo : -1;
}

// One thread: batches are short, and this mode is for tests and debugging.
__global__ void check_kernel(IndexCheck q, KvIndices x, IndexFaultAt* q_fault, KvFault* kv_fault) {
  int64_t longest;
  *q_fault = find_index_fault(q, x.batch, &longest);
  *kv_fault = q_fault->code == kFaultNone ? find_kvcache_fault(x) : KvFault{};
}

__global__ void totals_kernel(KvIndices x, int32_t* totals) {
  const int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (b < x.batch) totals[b] = static_cast<int32_t>(x.seqlen(b) + x.new_keys(b));
}

// Block (row r of k_new, KV head h), thread d: k_new rotated and v_new copied into the cache.
struct CacheOut {
  void* k;
  void* v;
  Strides4 ks, vs;
  const int32_t* table;
  int64_t page_size, table_stride;
  const int32_t* batch_idx;
};

__global__ void append_kernel(KvAppend a, CacheOut cache, DType dtype, int64_t head_dim) {
  const int64_t r = blockIdx.x, h = blockIdx.y;
  const int d = static_cast<int>(threadIdx.x);
  const KvIndices& x = a.indices;
  const int64_t b = x.cu_new ? sequence_of(x.cu_new, x.batch, r) : r / x.new_len;
  if (b < 0 || d >= head_dim) return;
  const int64_t i = x.cu_new ? r - x.cu_new[b] : r % x.new_len, row = x.cu_new ? r : i;
  const int64_t pos = x.seqlen(b) + i;
  const int64_t k_off = b * a.k_new_stride.b + row * a.k_new_stride.l + h * a.k_new_stride.h;
  const int64_t v_off = b * a.v_new_stride.b + row * a.v_new_stride.l + h * a.v_new_stride.h;
  const double k_val = rotated(a, a.k_new, dtype, k_off, d, pos);
  const double v_val = load_elem(a.v_new, dtype, v_off + d);
  store_elem(
      cache.k, dtype,
      cache_offset(cache.table, cache.page_size, cache.table_stride, cache.batch_idx, cache.ks, b, pos, h) +
          d,
      k_val);
  store_elem(
      cache.v, dtype,
      cache_offset(cache.table, cache.page_size, cache.table_stride, cache.batch_idx, cache.vs, b, pos, h) +
          d,
      v_val);
}

// Block (row r of q, head h), thread d: q rotated into q_rot (contiguous, q's shape).
__global__ void rotate_q_kernel(KvAppend a, const void* q, Strides4 qs, void* q_rot, DType dtype,
                                int64_t len_q, int64_t heads, int64_t head_dim) {
  const int64_t r = blockIdx.x, h = blockIdx.y;
  const int d = static_cast<int>(threadIdx.x);
  const KvIndices& x = a.indices;
  const int64_t b = x.cu_q ? sequence_of(x.cu_q, x.batch, r) : r / len_q;
  if (b < 0 || d >= head_dim) return;
  const int64_t i = x.cu_q ? r - x.cu_q[b] : r % len_q, row = x.cu_q ? r : i;
  const int64_t pos = x.seqlen(b) + (x.positional_q ? i : 0);
  const double val = rotated(a, q, dtype, (x.cu_q ? 0 : b * qs.b) + row * qs.l + h * qs.h, d, pos);
  store_elem(q_rot, dtype, (r * heads + h) * head_dim + d, val);
}

// The call's stream-ordered scratch (capturable), freed on the stream when the call ends.
class Workspace {
 public:
  Workspace(cudaStream_t stream, size_t bytes) : stream_(stream) {
    if (bytes > 0) TILEATTN_CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream_));
  }
  ~Workspace() {
    if (data_ != nullptr) (void)cudaFreeAsync(data_, stream_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  char* data() const { return static_cast<char*>(data_); }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void find_kvcache_faults(const AttnParams& p, const KvIndices& x, IndexFaultAt* q_fault, KvFault* kv_fault) {
  *q_fault = IndexFaultAt{};
  *kv_fault = KvFault{};
  DeviceGuard guard(p.device_index);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  const IndexCheck q{p.seqs.cu_q, nullptr, p.seqs.cu_q ? p.total_q : p.seqlen_q,
                     p.seqs.cu_q ? p.seqlen_q : -1};
  const size_t q_bytes = aligned(sizeof(IndexFaultAt));
  Workspace faults(stream, q_bytes + sizeof(KvFault));
  auto* d_q = reinterpret_cast<IndexFaultAt*>(faults.data());
  auto* d_kv = reinterpret_cast<KvFault*>(faults.data() + q_bytes);
  check_kernel<<<1, 1, 0, stream>>>(q, x, d_q, d_kv);
  TILEATTN_CUDA_CHECK_LAUNCH();
  TILEATTN_CUDA_CHECK(cudaMemcpyAsync(q_fault, d_q, sizeof(IndexFaultAt), cudaMemcpyDeviceToHost, stream));
  TILEATTN_CUDA_CHECK(cudaMemcpyAsync(kv_fault, d_kv, sizeof(KvFault), cudaMemcpyDeviceToHost, stream));
  TILEATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void forward_kvcache(AttnParams p, const KvAppend& a, Kernel kernel) {
  DeviceGuard guard(p.device_index);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  const KvIndices& x = a.indices;
  const int64_t B = p.batch, D = p.head_dim, Hq = p.heads_q, Hkv = p.heads_kv;
  const bool rotate_q = a.cos != nullptr && a.q_rows > 0 && Hq > 0;
  const size_t totals_bytes = aligned(static_cast<size_t>(B) * sizeof(int32_t));
  const size_t q_bytes = rotate_q ? static_cast<size_t>(a.q_rows * Hq * D) * dtype_size(p.dtype) : 0;
  Workspace ws(stream, totals_bytes + q_bytes);
  auto* totals = reinterpret_cast<int32_t*>(ws.data());
  const unsigned threads = static_cast<unsigned>(D);  // <= 256 (dispatch/limits.h)

  if (B > 0) {
    totals_kernel<<<static_cast<unsigned>((B + 255) / 256), 256, 0, stream>>>(x, totals);
    TILEATTN_CUDA_CHECK_LAUNCH();
  }
  const int64_t new_rows = !a.k_new ? 0 : x.cu_new ? x.new_rows : B * x.new_len;
  if (new_rows > 0 && Hkv > 0) {
    const CacheOut cache{
        const_cast<void*>(p.k), const_cast<void*>(p.v), p.k_stride, p.v_stride, p.page_table, p.page_size,
        p.page_table_stride,    p.kv_batch_idx};
    append_kernel<<<dim3(static_cast<unsigned>(new_rows), static_cast<unsigned>(Hkv)), threads, 0, stream>>>(
        a, cache, p.dtype, D);
    TILEATTN_CUDA_CHECK_LAUNCH();
  }
  if (rotate_q) {
    void* q_rot = ws.data() + totals_bytes;
    rotate_q_kernel<<<dim3(static_cast<unsigned>(a.q_rows), static_cast<unsigned>(Hq)), threads, 0, stream>>>(
        a, p.q, p.q_stride, q_rot, p.dtype, p.seqlen_q, Hq, D);
    TILEATTN_CUDA_CHECK_LAUNCH();
    p.q = q_rot;
    p.q_stride = p.seqs.varlen_q() ? Strides4{0, Hq * D, D, 1} : Strides4{p.seqlen_q * Hq * D, Hq * D, D, 1};
  }
  p.seqs.used_k = B > 0 ? totals : nullptr;
  forward(p, kernel);
}

}  // namespace tileattn::detail::cuda
