// cuDNN's fused attention behind Ops::attention_forward/backward (BERTCC_ATTENTION=cudnn;
// cuda_kernels.h: attention_cudnn_*): the switch, which calls it takes (a pure function of the
// call's shape, so that a forward and its backward take the same path), its scratch, and the calls:
// key lengths from the mask and the dropout decisions as cuDNN's keep mask
// (attention/cudnn_switch_kernels.cuh), then attention/cudnn_graphs.h's graphs.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "core/settings.h"
#include "cuda/attention/cudnn_graphs.h"
#include "cuda/attention/cudnn_switch_kernels.cuh"
#include "cuda/cuda_kernels.h"

namespace bertcc::cuda {
namespace {

std::mutex g_mu;
int g_impl = -1;  // AttentionImpl, or -1: not read yet

int64_t aligned16(int64_t n) { return (n + 15) / 16 * 16; }

// The cuDNN path's scratch in `work` (floats, each part 64-byte aligned): q_len, kv_len, prefix
// (int32 [B] each), then (training) dout's bf16 rounding [B, T, C], then (dropout) the keep mask
// [B, NH, T, T] bf16.
struct WorkLayout {
  int64_t q_len, kv_len, prefix, dout16, mask, total;
};
WorkLayout layout(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, bool training) {
  WorkLayout w{};
  w.q_len = 0;
  w.kv_len = aligned16(B);
  w.prefix = 2 * aligned16(B);
  w.dout16 = 3 * aligned16(B);
  w.mask = w.dout16 + (training ? aligned16((B * T * C + 1) / 2) : 0);
  w.total = w.mask + (dropout ? aligned16((B * NH * T * T + 1) / 2) : 0);
  return w;
}

// Said once per distinct line (stderr).
void say_once(const std::string& line) {
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(g_mu);
  if (said.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

std::string shape_text(int64_t B, int64_t T, int64_t C, int64_t NH, float p, Precision prec, bool forward_only) {
  return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) + " head size " +
         std::to_string(NH > 0 ? C / NH : 0) + " " + precision_name(prec) +
         (forward_only ? " inference"
          : p > 0      ? " training, dropout " + std::to_string(p)
                       : " training, no dropout");
}

}  // namespace

AttentionImpl attention_impl() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_impl < 0) {
    g_impl = static_cast<int>(settings().attention_cudnn ? AttentionImpl::Cudnn : AttentionImpl::Bertcc);
  }
  return static_cast<AttentionImpl>(g_impl);
}

void set_attention_impl(AttentionImpl impl) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_impl = static_cast<int>(impl);
}

void attention_impl_check() {
  if (attention_impl() != AttentionImpl::Cudnn) return;
  const cudnn::Library& lib = cudnn::library();
  BERTCC_CHECK(lib.loaded, "BERTCC_ATTENTION=cudnn: cuDNN cannot be loaded from '", lib.path, "': ", lib.why,
               " (BERTCC_CUDNN_LIB names the library; unset BERTCC_ATTENTION for bertcc's kernels)");
  const std::string h = cudnn::probe_handle();
  BERTCC_CHECK(h == "ok", "BERTCC_ATTENTION=cudnn: cuDNN (", lib.path, ", version ", lib.version,
               ") cannot make a handle: ", h);
}

std::string attention_impl_describe() {
  if (attention_impl() != AttentionImpl::Cudnn) return "attention: bertcc's kernels";
  const cudnn::Library& lib = cudnn::library();
  return "attention: cuDNN's fused SDPA (BERTCC_ATTENTION=cudnn, " + lib.path + " version " +
         std::to_string(lib.version) +
         ") for bf16 padded batches with right-padded masks, head size 64 or 128, T <= 512; bertcc's kernels "
         "otherwise";
}

int64_t attention_cudnn_work_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                                  bool inference) {
  if (attention_impl() != AttentionImpl::Cudnn || prec != Precision::BF16 || NH <= 0 || C % NH != 0) return 0;
  const int64_t hs = C / NH;
  if ((hs != 64 && hs != 128) || T > 512) return 0;
  return layout(B, T, C, NH, dropout && !inference, !inference).total;
}

bool attention_cudnn_takes(int64_t B, int64_t T, int64_t C, int64_t NH, float p, Precision prec, const bf16_t* qkv16,
                           bool right_padded, bool forward_only) {
  if (attention_impl() != AttentionImpl::Cudnn) return false;
  const std::string shape = shape_text(B, T, C, NH, p, prec, forward_only);
  auto no = [&](const std::string& why) {
    say_once("attention " + shape + ": bertcc's kernels (BERTCC_ATTENTION=cudnn, but " + why + ")");
    return false;
  };
  if (B * T == 0) return false;
  if (prec != Precision::BF16) return no("cuDNN's graphs here are bf16 only");
  if (NH <= 0 || C % NH != 0 || (C / NH != 64 && C / NH != 128)) return no("the head size is not 64 or 128");
  if (T > 512) return no("T > 512");
  if (!right_padded) return no("the caller does not say that its mask is right-padded (lengths)");
  if (!qkv16 || reinterpret_cast<uintptr_t>(qkv16) % 16 != 0) return no("no 16-byte aligned qkv16 to read in place");
  if (forward_only && p > 0) return no("an inference call with dropout");
  std::string why;
  if (!cudnn::sdpa_ready(B, T, NH, C / NH, !forward_only, p > 0, &why)) return no("cuDNN: " + why);
  say_once("attention " + shape + ": cuDNN's fused SDPA");
  return true;
}

namespace {

// q_len, kv_len and the prefix flags from the mask, and the trap where a sequence is not right-padded.
void lengths(const WorkLayout& w, float* work, const float* mask_add, int64_t B, int64_t T) {
  auto* ints = reinterpret_cast<int32_t*>(work);
  attn::mask_lengths<<<static_cast<unsigned>(B), 32, 0, stream()>>>(ints + w.q_len, ints + w.kv_len, ints + w.prefix,
                                                                    mask_add, T);
  BERTCC_CUDA_LAUNCHED("attention (cuDNN): key lengths");
  attn::require_prefix<<<1, 32, 0, stream()>>>(ints + w.prefix, B);
  BERTCC_CUDA_LAUNCHED("attention (cuDNN): right-padding check");
}

uint16_t* keep_mask(const WorkLayout& w, float* work, const attn::Shape& s) {
  auto* mask = reinterpret_cast<uint16_t*>(work + w.mask);
  attn::keep_mask<<<grid_for(s.B * s.NH * s.T * ((s.T + 1) / 2), 256), 256, 0, stream()>>>(mask, s);
  BERTCC_CUDA_LAUNCHED("attention (cuDNN): dropout keep mask");
  return mask;
}

}  // namespace

void attention_cudnn_forward(float* out, bf16_t* out16, float* saved, float* work, const bf16_t* qkv16,
                             const float* mask_add, int64_t B, int64_t T, int64_t C, int64_t NH, float dropout_p,
                             const Rng& rng, uint64_t base, bool forward_only) {
  BERTCC_CHECK(out16, "attention_forward: the cuDNN path (BERTCC_ATTENTION=cudnn) writes out16, and none was given");
  const attn::Shape s = attn::make_shape(B, T, C, NH, dropout_p, rng, base);
  const bool drop = dropout_p > 0;
  const WorkLayout w = layout(B, T, C, NH, drop, !forward_only);
  lengths(w, work, mask_add, B, T);
  const auto* ints = reinterpret_cast<const int32_t*>(work);
  const uint16_t* mask = drop ? keep_mask(w, work, s) : nullptr;
  std::string why;
  const bool ok =
      forward_only
          ? cudnn::sdpa_forward_bf16(out16, qkv16, ints + w.q_len, ints + w.kv_len, B, T, NH, C / NH, &why)
          : cudnn::sdpa_train_forward_bf16(out16, saved, qkv16, ints + w.q_len, ints + w.kv_len,
                                           reinterpret_cast<const bf16_t*>(mask), dropout_p, B, T, NH, C / NH, &why);
  // (a plan was made for this shape: a failure now is an error, not a change of path that the
  // backward would not know of)
  BERTCC_CHECK(ok, "attention_forward (cuDNN, ", shape_text(B, T, C, NH, dropout_p, Precision::BF16, forward_only),
               "): ", why);
  if (out) widen16(out, reinterpret_cast<const uint16_t*>(out16), B * T * C, true);
}

void attention_cudnn_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const bf16_t* qkv16,
                              const bf16_t* out16, const float* saved, const float* mask_add, int64_t B, int64_t T,
                              int64_t C, int64_t NH, float dropout_p, const Rng& rng, uint64_t base) {
  BERTCC_CHECK(out16 && dqkv16,
               "attention_backward: the cuDNN path (BERTCC_ATTENTION=cudnn) reads out16 and writes dqkv16, and ",
               out16 ? "no dqkv16" : "no out16", " was given");
  const attn::Shape s = attn::make_shape(B, T, C, NH, dropout_p, rng, base);
  const bool drop = dropout_p > 0;
  const WorkLayout w = layout(B, T, C, NH, drop, true);
  lengths(w, work, mask_add, B, T);
  const auto* ints = reinterpret_cast<const int32_t*>(work);
  auto* dout16 = reinterpret_cast<bf16_t*>(work + w.dout16);
  to_bf16(dout16, dout, B * T * C);
  const uint16_t* mask = drop ? keep_mask(w, work, s) : nullptr;
  std::string why;
  BERTCC_CHECK(cudnn::sdpa_backward_bf16(dqkv16, qkv16, out16, dout16, saved, ints + w.q_len, ints + w.kv_len,
                                         reinterpret_cast<const bf16_t*>(mask), dropout_p, B, T, NH, C / NH, &why),
               "attention_backward (cuDNN, ", shape_text(B, T, C, NH, dropout_p, Precision::BF16, false), "): ", why);
  attn::zero_padding_keys<<<grid_for(B * T * (2 * C / 8), 256), 256, 0, stream()>>>(reinterpret_cast<uint16_t*>(dqkv16),
                                                                                    ints + w.kv_len, B, T, C);
  BERTCC_CUDA_LAUNCHED("attention_backward (cuDNN): padding keys' dK, dV");
  if (dqkv) widen16(dqkv, reinterpret_cast<const uint16_t*>(dqkv16), B * T * 3 * C, true);
}

}  // namespace bertcc::cuda
