// example.cc: the README's C++ example: tiled attention on CPU buffers, checked against eager.
#include <tileattn/tileattn.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const int64_t B = 2, L = 1000, H = 8, HKV = 2, D = 64;  // GQA: 4 query heads per kv head
  std::vector<float> q(B * L * H * D), k(B * L * HKV * D), v(B * L * HKV * D);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  std::vector<float> out(q.size()), ref(q.size()), lse(B * H * L);

  using tileattn::DType, tileattn::TensorRef;
  auto Q = TensorRef::contiguous(q.data(), DType::kFloat32, {B, L, H, D});
  auto K = TensorRef::contiguous(k.data(), DType::kFloat32, {B, L, HKV, D});
  auto V = TensorRef::contiguous(v.data(), DType::kFloat32, {B, L, HKV, D});
  auto O = TensorRef::contiguous(out.data(), DType::kFloat32, {B, L, H, D});
  auto LSE = TensorRef::contiguous(lse.data(), DType::kFloat32, {B, H, L});
  tileattn::Options options;
  options.causal = true;
  tileattn::forward(Q, K, V, O, &LSE, options);  // throws tileattn::Error on bad input

  tileattn::eager(Q, K, V, TensorRef::contiguous(ref.data(), DType::kFloat32, {B, L, H, D}), nullptr,
                  options);
  float max_diff = 0;
  for (size_t i = 0; i < out.size(); ++i) max_diff = std::fmax(max_diff, std::fabs(out[i] - ref[i]));
  std::printf("tileattn %s: max |tiled - eager| = %.2e\n", tileattn::version(), max_diff);
  return max_diff < 1e-4f ? 0 : 1;
}
