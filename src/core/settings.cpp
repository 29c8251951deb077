#include "core/settings.h"

#include <cstdlib>
#include <string>

#include "bertcc/error.h"

namespace bertcc {
namespace {

// A variable that takes one of `values` (unset or empty: nothing to do, returns "")
std::string choice(const std::function<const char*(const char*)>& env, const char* name,
                   std::initializer_list<const char*> values, const char* meaning) {
  const char* v = env(name);
  if (!v || !*v) return "";
  std::string list;
  for (const char* ok : values) {
    if (std::string(v) == ok) return v;
    list += (list.empty() ? "" : " or ") + std::string(ok);
  }
  fail(name, ": '", v, "' is not ", list, " (", meaning, "; docs/flags.md)");
}

std::string text(const std::function<const char*(const char*)>& env, const char* name) {
  const char* v = env(name);
  return v ? v : "";
}

RuntimeSettings& process_settings() {
  static RuntimeSettings s = parse_settings([](const char* name) { return std::getenv(name); });
  return s;
}

}  // namespace

RuntimeSettings parse_settings(const std::function<const char*(const char*)>& env) {
  RuntimeSettings s;
  s.padded = choice(env, "BERTCC_PADDED", {"0", "1"}, "1: compute batches padded, as --padded") == "1";
  s.profile_gemm = choice(env, "BERTCC_PROFILE_GEMM", {"0", "1"}, "1: the CPU GEMMs' profile at exit") == "1";
  s.cuda_profile = choice(env, "BERTCC_CUDA_PROFILE", {"0", "1"}, "1: GPU time per operation") == "1";
  s.attention_cudnn = choice(env, "BERTCC_ATTENTION", {"bertcc", "cudnn"},
                             "bertcc's kernels, the default, or cuDNN's fused attention") == "cudnn";
  s.cuda_module = text(env, "BERTCC_CUDA_MODULE");
  s.cudnn_lib = text(env, "BERTCC_CUDNN_LIB");
  s.gemm_tuning = text(env, "BERTCC_GEMM_TUNING");
  s.gemm_tune = choice(env, "BERTCC_GEMM_TUNE", {"0", "1"}, "1: time the GEMMs the tuning file lacks") == "1";
  const std::string rows = choice(env, "BERTCC_ATTENTION_FWD_ROWS", {"64", "128"}, "query rows per forward block");
  s.attention_fwd_rows = rows.empty() ? 0 : std::stoi(rows);
  const std::string blocks =
      choice(env, "BERTCC_ATTENTION_FWD_MIN_BLOCKS", {"1", "4"}, "blocks per SM of the head-size-64 forward");
  s.attention_fwd_min_blocks = blocks.empty() ? 0 : std::stoi(blocks);
  s.attention_skip_padding =
      choice(env, "BERTCC_ATTENTION_SKIP_PADDING", {"0", "1"}, "0: attention reads the padding keys too") != "0";
  s.cuda_varlen = choice(env, "BERTCC_CUDA_VARLEN", {"0", "1"}, "0: no varlen attention kernels on CUDA") != "0";
  s.cls_last_layer = choice(env, "BERTCC_CLS_LAST_LAYER", {"0", "1"},
                            "0: a classification head's inference computes the last layer on every row") != "0";
  return s;
}

const RuntimeSettings& settings() { return process_settings(); }

void set_allow_tf32(bool on) { process_settings().allow_tf32 = on; }
void set_cuda_graphs(bool on) { process_settings().cuda_graphs = on; }
void set_padded_execution(bool on) { process_settings().padded = on; }
void set_int8_fp32_embeddings(bool on) { process_settings().int8_fp32_embeddings = on; }
void set_cls_rows_last_layer(bool on) { process_settings().cls_last_layer = on; }
void set_int8_activation_bits(int bits) {
  BERTCC_CHECK(int8_activation_bits_valid(bits), "--int8-activation-bits: ", bits, " is not 7, 8 or auto");
  process_settings().int8_activation_bits = bits;
}

std::string describe_settings(const RuntimeSettings& s) {
  const RuntimeSettings d;
  std::string out;
  auto add = [&](bool differs, const std::string& what) {
    if (differs) out += (out.empty() ? "" : ", ") + what;
  };
  add(s.allow_tf32, "--allow-tf32");
  add(s.cuda_graphs, "--cuda-graphs");
  add(s.padded, "--padded");
  add(s.int8_activation_bits != 0, "--int8-activation-bits " + std::to_string(s.int8_activation_bits));
  add(s.int8_fp32_embeddings, "--int8-fp32-embeddings");
  add(s.profile_gemm, "BERTCC_PROFILE_GEMM=1");
  add(s.cuda_profile, "BERTCC_CUDA_PROFILE=1");
  add(s.attention_cudnn, "BERTCC_ATTENTION=cudnn");
  add(s.cuda_module != d.cuda_module, "BERTCC_CUDA_MODULE=" + s.cuda_module);
  add(s.cudnn_lib != d.cudnn_lib, "BERTCC_CUDNN_LIB=" + s.cudnn_lib);
  add(s.gemm_tuning != d.gemm_tuning, "BERTCC_GEMM_TUNING=" + s.gemm_tuning);
  add(s.gemm_tune, "BERTCC_GEMM_TUNE=1");
  add(s.attention_fwd_rows != 0, "BERTCC_ATTENTION_FWD_ROWS=" + std::to_string(s.attention_fwd_rows));
  add(s.attention_fwd_min_blocks != 0, "BERTCC_ATTENTION_FWD_MIN_BLOCKS=" + std::to_string(s.attention_fwd_min_blocks));
  add(!s.attention_skip_padding, "BERTCC_ATTENTION_SKIP_PADDING=0");
  add(!s.cuda_varlen, "BERTCC_CUDA_VARLEN=0");
  add(!s.cls_last_layer, "BERTCC_CLS_LAST_LAYER=0");
  return out;
}

}  // namespace bertcc
