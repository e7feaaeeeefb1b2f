// combine.cc: the public merge of partial attention states: validate once, run on q's device.
#include "common/combine.h"

#include <string>

#include "api/validate.h"
#include "cpu/combine.h"
#include "tileattn/error.h"
#include "tileattn/varlen.h"
#if defined(TILEATTN_WITH_CUDA)
#include "cuda/cuda_api.h"
#endif

namespace tileattn {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

void check_rank(const char* name, const TensorRef& t, int rank, const char* layout) {
  if (t.rank != rank)
    throw Error(name, "rank " + str(t.rank) + " (shape " + shape_string(t) + "), expected " + str(rank) +
                          " dims " + layout);
  for (int d = 0; d < rank; ++d)
    if (t.shape[d] < 0 || t.stride[d] < 0)
      throw Error(name, "shape " + shape_string(t) + " has a negative size or stride in dim " + str(d));
  if (t.numel() > 0 && t.data == nullptr) throw Error(name, "data is null for shape " + shape_string(t));
}

void check_dim(const char* name, const TensorRef& t, int d, const char* what, int64_t expected,
               const char* source) {
  if (t.shape[d] != expected)
    throw Error(name, "shape " + shape_string(t) + ": " + what + " (dim " + str(d) + ") is " +
                          str(t.shape[d]) + ", expected " + str(expected) + " as in " + source);
}

using detail::overlaps;

}  // namespace

void combine(const TensorRef& out_partial, const TensorRef& lse_partial, const TensorRef& out,
             const TensorRef* lse, const Options& options) {
  check_rank("out_partial", out_partial, 5, "[splits, batch, seqlen, heads, head_dim]");
  check_rank("lse_partial", lse_partial, 4, "[splits, batch, heads, seqlen]");
  check_rank("out", out, 4, "[batch, seqlen, heads, head_dim]");
  if (lse) check_rank("lse", *lse, 3, "[batch, heads, seqlen]");
  const int64_t S = out_partial.shape[0], B = out_partial.shape[1], L = out_partial.shape[2],
                H = out_partial.shape[3], D = out_partial.shape[4];
  if (S < 1 || S > kMaxSplits)
    throw Error("out_partial", "splits (dim 0) is " + str(S) + ", expected 1 to " + str(kMaxSplits));
  const int dims_lse[4] = {0, 1, 3, 2};  // lse_partial [S, B, H, L] against out_partial's dims
  const char* names[5] = {"splits", "batch", "seqlen", "heads", "head_dim"};
  for (int d = 0; d < 4; ++d)
    check_dim("lse_partial", lse_partial, d, names[dims_lse[d]], out_partial.shape[dims_lse[d]],
              "out_partial");
  for (int d = 0; d < 4; ++d) check_dim("out", out, d, names[d + 1], out_partial.shape[d + 1], "out_partial");
  if (lse) {
    check_dim("lse", *lse, 0, "batch", B, "out_partial");
    check_dim("lse", *lse, 1, "heads", H, "out_partial");
    check_dim("lse", *lse, 2, "seqlen", L, "out_partial");
  }
  if (out_partial.dtype != DType::kFloat32)
    throw Error("out_partial", std::string("dtype ") + dtype_name(out_partial.dtype) + ", expected fp32");
  if (lse_partial.dtype != DType::kFloat32)
    throw Error("lse_partial", std::string("dtype ") + dtype_name(lse_partial.dtype) + ", expected fp32");
  if (out.dtype != DType::kFloat32 && out.dtype != DType::kFloat16 && out.dtype != DType::kBFloat16)
    throw Error("out", std::string("dtype ") + dtype_name(out.dtype) + ", expected fp32, fp16 or bf16");
  if (lse && lse->dtype != DType::kFloat32)
    throw Error("lse", std::string("dtype ") + dtype_name(lse->dtype) + ", expected fp32");
  for (auto [name, t] :
       {std::pair<const char*, const TensorRef*>{"lse_partial", &lse_partial}, {"out", &out}, {"lse", lse}})
    if (t && t->device != out_partial.device)
      throw Error(name, "is on " + device_name(t->device) + " but out_partial is on " +
                            device_name(out_partial.device));
  for (auto [name, t] : {std::pair<const char*, const TensorRef*>{"out_partial", &out_partial},
                         {"lse_partial", &lse_partial}}) {
    if (overlaps(out, *t)) throw Error("out", std::string("overlaps ") + name + " in memory");
    if (lse && overlaps(*lse, *t)) throw Error("lse", std::string("overlaps ") + name + " in memory");
  }
  if (lse && overlaps(*lse, out)) throw Error("lse", "overlaps out in memory");

  detail::CombineParams c;
  c.o_part = static_cast<const float*>(out_partial.data);
  c.o_ss = out_partial.stride[0], c.o_sb = out_partial.stride[1], c.o_sl = out_partial.stride[2];
  c.o_sh = out_partial.stride[3], c.o_sd = out_partial.stride[4];
  c.lse_part = static_cast<const float*>(lse_partial.data);
  c.l_ss = lse_partial.stride[0], c.l_sb = lse_partial.stride[1], c.l_sh = lse_partial.stride[2];
  c.l_sl = lse_partial.stride[3];
  c.out = out.data;
  c.out_dtype = out.dtype;
  c.out_sb = out.stride[0], c.out_sl = out.stride[1], c.out_sh = out.stride[2], c.out_sd = out.stride[3];
  if (lse) {
    c.lse = static_cast<float*>(lse->data);
    c.lse_sb = lse->stride[0], c.lse_sh = lse->stride[1], c.lse_sl = lse->stride[2];
  }
  c.splits = static_cast<int>(S);
  c.batch = B, c.heads = H, c.head_dim = D;
  c.seqs.max_q = L;
  c.device_index = out_partial.device.index;
  c.cuda_stream = options.cuda_stream;
  c.num_threads = options.num_threads;
  if (B == 0 || L == 0 || H == 0) return;
  if (out_partial.device.kind == DeviceKind::kCPU) {
    detail::cpu::combine(c);
    return;
  }
#if defined(TILEATTN_WITH_CUDA)
  detail::cuda::combine(c);
#else
  throw Error("out_partial", "is on " + device_name(out_partial.device) +
                                 ", but this build of tileattn has no CUDA kernels");
#endif
}

}  // namespace tileattn
