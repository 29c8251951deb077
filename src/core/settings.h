// Every process-wide run-time switch in one place: the command-line flags that are process-wide
// (--allow-tf32, --cuda-graphs, --padded) and the BERTCC_* environment variables. The environment
// is read once, by one parser (parse_settings: a bad value is an error naming the variable and the
// values it takes), on the first call of settings(); the flags' setters then change what they set.
// Code reads settings() where a switch takes effect and nowhere reads the environment itself.
// describe_settings() names what is not the default, for the backends' start-up lines, so that
// two runs that take different kernels say so. docs/flags.md lists every variable.
#pragma once
#include <functional>
#include <string>

namespace bertcc {

struct RuntimeSettings {
  // ---- flags (the environment cannot set them, except BERTCC_PADDED) ----
  bool allow_tf32 = false;            // --allow-tf32: fp32 GEMMs on CUDA with TF32 products
  bool cuda_graphs = false;           // --cuda-graphs: the inference forward recorded and replayed (CUDA)
  bool padded = false;                // --padded or BERTCC_PADDED=1: batches computed padded to their longest row
  int int8_activation_bits = 0;       // --int8-activation-bits: 7 or 8 (0: auto, int8_activation_bits())
  bool int8_fp32_embeddings = false;  // --int8-fp32-embeddings: the word embeddings not quantized
  // BERTCC_CLS_LAST_LAYER=0|1 (default 1): a sequence-classification head's inference computes the
  // last layer past its attention for the [CLS] rows alone (the same logits); 0: every row, for comparison
  bool cls_last_layer = true;

  // ---- the environment: measurement ----
  bool profile_gemm = false;  // BERTCC_PROFILE_GEMM=1: the CPU GEMMs' time per shape, printed at exit
  bool cuda_profile = false;  // BERTCC_CUDA_PROFILE=1: GPU time per operation (op_timer.h)

  // ---- the environment: where the CUDA half is (backend/cuda_module.h) ----
  std::string cuda_module;  // BERTCC_CUDA_MODULE: the CUDA module to open (empty: libbertcc_cuda.so beside bertcc)

  // ---- the environment: CUDA kernel choices (the same results either way unless said) ----
  bool attention_cudnn = false;        // BERTCC_ATTENTION=cudnn (default bertcc): cuDNN's fused attention
  std::string cudnn_lib;               // BERTCC_CUDNN_LIB: the libcudnn to open (empty: libcudnn.so.9)
  std::string gemm_tuning;             // BERTCC_GEMM_TUNING: a GEMM tuning file to read (gemm_tuning.h)
  bool gemm_tune = false;              // BERTCC_GEMM_TUNE=1: time untuned GEMMs and write the file
  int attention_fwd_rows = 0;          // BERTCC_ATTENTION_FWD_ROWS=64|128 (0: unset, 64)
  int attention_fwd_min_blocks = 0;    // BERTCC_ATTENTION_FWD_MIN_BLOCKS=1|4 (0: unset, 1)
  bool attention_skip_padding = true;  // BERTCC_ATTENTION_SKIP_PADDING=0|1
  bool cuda_varlen = true;             // BERTCC_CUDA_VARLEN=0|1: the varlen attention kernels
};

// The one parser: the settings an environment gives (`env` looks a name up; null: unset). Unset or
// empty variables keep the defaults; a bad value throws, naming the variable and its values.
RuntimeSettings parse_settings(const std::function<const char*(const char*)>& env);
// The process's settings: the environment's (parse_settings of std::getenv) on the first call,
// then as the setters below leave them.
const RuntimeSettings& settings();
// What differs from the defaults, as "BERTCC_ATTENTION=cudnn, --padded" (empty: nothing).
std::string describe_settings(const RuntimeSettings& s);

// ---- the process-wide flags ----
// --allow-tf32 (PyTorch's torch.backends.cuda.matmul.allow_tf32); off by default: exact fp32.
// Applies to the backends backend_for() hands out after it is set; on the CPU it has no effect,
// and backend_for says so once.
void set_allow_tf32(bool on);
inline const char* allow_tf32_help() {
  return "fp32 GEMMs on CUDA with TF32 products (10-bit mantissas, fp32 sums; PyTorch's allow_tf32); "
         "default: exact fp32. No effect on the CPU or with --precision bf16/fp16";
}
// --cuda-graphs (inference commands): each forward shape seen twice is recorded as a CUDA graph and
// replayed from then on (Bert::encode). backend_for refuses it for any device but cuda.
void set_cuda_graphs(bool on);
inline bool cuda_graphs() { return settings().cuda_graphs; }
inline const char* cuda_graphs_help() {
  return "with --device cuda: record the encoder's forward as a CUDA graph for each batch shape seen twice "
         "and replay it (one launch instead of one per kernel; the same results); batches are then computed "
         "padded to their longest row, the shape a graph records";
}
// Unpadded execution (Bert::encode): the encoder computes a batch's real tokens only, packed
// sequence after sequence, and restores the padded layout for the heads. On by default; --padded
// (or BERTCC_PADDED=1) computes every batch padded to its longest row, for comparison (and for
// dump-step, whose checks against PyTorch compute the padding).
void set_padded_execution(bool on);
inline bool padded_execution() { return settings().padded; }
inline const char* padded_help() {
  return "compute each batch padded to its longest row (the padding too) instead of its real tokens only "
         "(the default; also BERTCC_PADDED=1): for comparison";
}

// The last encoder layer on the [CLS] rows alone for a head that reads nothing else (Encoder::encode;
// BERTCC_CLS_LAST_LAYER=0 turns it off). Tests and benchmarks compare the two with the setter.
void set_cls_rows_last_layer(bool on);
inline bool cls_rows_last_layer() { return settings().cls_last_layer; }

// --int8-activation-bits (the int8 inference commands): 7 or 8, 0 for auto (runtime.h,
// int8_activation_bits: 7 where bertcc's int8 kernel is its AVX2 one, 8 elsewhere).
// The values either takes: 7, 8, or 0 (auto).
inline bool int8_activation_bits_valid(int bits) { return bits == 0 || bits == 7 || bits == 8; }
void set_int8_activation_bits(int bits);
void set_int8_fp32_embeddings(bool on);
inline const char* int8_fp32_embeddings_help() {
  return "with --precision int8: keep the word embeddings in fp32 (default: 8-bit per row, a quarter of their "
         "memory: 23 MB instead of 94 for bert-base); for a model whose accuracy they cost";
}
inline const char* int8_activation_bits_help() {
  return "with --precision int8: the bits the linear layers' inputs are quantized to per row: 8 ([-127, 127]) "
         "or 7 ([-63, 63]: twice 8's rounding error, and on a CPU without VNNI or AVX-512 bertcc's AVX2 kernel "
         "multiplies them in 3 instructions where 8 take 4); auto (default): 7 on such a CPU, 8 elsewhere";
}

}  // namespace bertcc
