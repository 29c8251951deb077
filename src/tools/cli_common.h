#pragma once
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "bertcc/dist.h"

namespace bertcc {
struct PretrainOptions;
}

namespace bertcc::tools {

// The output folders a command makes (`make`: each folder of the path that did not exist),
// removed again, innermost first, if the command leaves by an exception: a refused run leaves
// no empty folder behind. Folders that hold files are kept (std::filesystem::remove removes an
// empty folder only), so what a run wrote before it failed stays for the user to see.
class FoldersMade {
 public:
  FoldersMade() = default;
  FoldersMade(const FoldersMade&) = delete;
  FoldersMade& operator=(const FoldersMade&) = delete;
  void make(const std::filesystem::path& dir) {
    std::vector<std::filesystem::path> fresh;
    for (std::filesystem::path p = dir; !p.empty() && !std::filesystem::exists(p); p = p.parent_path()) {
      fresh.push_back(p);
      if (p == p.parent_path()) break;
    }
    std::filesystem::create_directories(dir);
    made_.insert(made_.end(), fresh.begin(), fresh.end());  // innermost first
  }
  ~FoldersMade() {
    if (std::uncaught_exceptions() <= exceptions_) return;
    std::error_code ec;
    for (const auto& p : made_) std::filesystem::remove(p, ec);
  }

 private:
  std::vector<std::filesystem::path> made_;
  int exceptions_ = std::uncaught_exceptions();
};

// NVIDIA's flag names in dash form, with the underscore spelling as an alias: "--train-batch-size"
// becomes "--train-batch-size,--train_batch_size".
inline std::string flag(const std::string& dashed) {
  std::string under = dashed;
  for (size_t i = 2; i < under.size(); ++i)
    if (under[i] == '-') under[i] = '_';
  return under == dashed ? dashed : dashed + "," + under;
}

// One flag vocabulary (docs/flags.md): the spelling a flag is documented by, then the spellings
// earlier versions used, which keep working; each with its underscore spelling.
inline std::string flag(const std::string& dashed, std::initializer_list<std::string> old) {
  std::string names = flag(dashed);
  for (const auto& o : old) {  // (appended in two steps: gcc 12's -Wrestrict misreads "," + std::string&&)
    names += ',';
    names += flag(o);
  }
  return names;
}

// The help of every command: dash spellings, old spellings after the new, defaults in the text.
std::shared_ptr<CLI::FormatterBase> help_formatter();
// Puts every option's default into its help (called once all commands exist).
void show_defaults(CLI::App& app);
// For a parse that left arguments over: which flag or command was meant (the nearest spellings),
// one line per unknown argument; empty when nothing was left over.
std::string unknown_argument_message(const CLI::App& root);

// --threads: 0 (the default: all cores) up to 4 x the cores; beyond that threads only contend
// (10000 threads made fine-tuning ~250x slower).
// --precision of the inference commands (qa, classify, tag, embed, fill-mask, serve)
inline const char* const kInferPrecisionHelp =
    "auto (default: bf16 on a GPU and on a CPU with AVX512-BF16 or AMX, fp32 on other CPUs) | bf16 | fp32 | "
    "int8 (CPU: the encoder's linear layers quantized to int8, weights per output channel "
    "and activations per row, the attention's two products (8-bit probabilities) and the word embeddings "
    "(8-bit rows); the position and token-type embeddings, the softmax's "
    "scores, LayerNorm, GELU, pooler and "
    "task head stay fp32)";

// The name of the range checks (in_range, threads_check). Every numeric flag must have one
// (check_numeric_flags refuses to start otherwise): CLI11's own Range and PositiveNumber do not
// count, being unbounded or unnamed, and their errors do not say what the flag sizes.
inline const std::string kRangeValidator = "in_range";

inline CLI::Validator threads_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const long max = 4L * static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));
        long v = 0;
        try {
          size_t used = 0;
          v = std::stol(s, &used);
          if (used != s.size()) return "'" + s + "' is not a whole number";
        } catch (...) {
          return "'" + s + "' is not a whole number";
        }
        if (v < 0 || v > max)
          return s + " is outside 0 (all cores) to " + std::to_string(max) + " (4 x this machine's cores)";
        return "";
      },
      "0 = all cores", kRangeValidator);
}

// Integer flags: the text must be a whole number that fits 64 bits (CLI11 saturates
// 99999999999999999999 to 2^63-1 without a word); the range is the trainers' to check.
inline CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || end != s.c_str() + s.size()) return "'" + s + "' is not a whole number";
        if (errno == ERANGE) return "'" + s + "' is beyond a 64-bit integer";
        return "";
      },
      "");
}

// ---- numeric flags: one layer for every command (flag_checks.cpp). CLI11 runs these on the text
// of the flag as it parses, before any command starts (so before anything is allocated), and its
// error names the flag: "--num-unused: 1e+09 is outside [0, 100000] ([unused] slots)".
// A number in [lo, hi], or (lo, hi] when `lo_open` (NaN, inf and 1e999 refused); `what` says what
// the flag sizes or means.
CLI::Validator in_range(double lo, double hi, const std::string& what, bool lo_open = false);
// Bounds shared by several commands. A float flag that sizes nothing is still bounded by what a
// float holds (1e39 would become inf), and step counts by the trainers' 1e12.
inline constexpr double kFloatMax = 3.4028234663852886e38;
inline constexpr double kMaxSteps = 1e12;
inline constexpr double kMaxSeed = 9223372036854775807.0;  // 2^63 - 1
inline constexpr double kMaxBatch = 65536;                 // sequences held in memory at once
// Every float flag of every command (CLI11's FLOAT options) refuses NaN and inf, and every integer
// flag a text that is not a whole number (check_numeric_flags is called once all commands exist).
CLI::Validator finite_number();
void check_numeric_flags(CLI::App& app);

// Casing on the data commands (tokenize, create-pretraining-data): --do-lower-case alone or with
// true|false (the form earlier versions took), or --no-lower-case; "" leaves it to the vocabulary.
// The value of a true|false flag (tools/tokenize.cpp); anything else fails naming the flag.
bool parse_bool_flag(const std::string& name, const std::string& v);
inline void add_casing_flags(CLI::App* sub, std::string& lower) {
  sub->add_option(
         flag("--do-lower-case"), lower,
         "lower-case and strip accents; also takes true|false (default: true iff the vocabulary has no capitals)")
      ->expected(0, 1)
      ->default_str("true");
  sub->add_flag_callback(
      flag("--no-lower-case"), [&lower] { lower = "false"; }, "keep case and accents");
}

// --device and --allow-tf32, on every command that runs a model.
inline void add_device_flags(CLI::App* sub, std::string& device) {
  sub->add_option("--device", device, device_help());
  sub->add_flag_callback(
      flag("--allow-tf32"), [] { set_allow_tf32(true); }, allow_tf32_help());
  sub->add_flag_callback(
      "--padded", [] { set_padded_execution(true); }, padded_help());
}

// --int8-activation-bits, on the commands that take --precision int8 (qa, classify, tag, embed,
// fill-mask, serve, bench, finetune's eval and prediction, export-onnx: `help` its own text).
inline void add_int8_flags(CLI::App* sub, const char* help = int8_activation_bits_help()) {
  sub->add_option_function<std::string>(
         flag("--int8-activation-bits"),
         [](const std::string& v) { set_int8_activation_bits(v == "auto" ? 0 : std::stoi(v)); }, help)
      ->check(CLI::IsMember({"auto", "7", "8"}))
      ->default_str("auto");
  sub->add_flag_callback(
      flag("--int8-fp32-embeddings"), [] { set_int8_fp32_embeddings(true); }, int8_fp32_embeddings_help());
}

// --cuda-graphs, on the commands that only infer (qa, classify, tag, embed, fill-mask, serve, bench).
inline void add_cuda_graphs_flag(CLI::App* sub) {
  sub->add_flag_callback(
      flag("--cuda-graphs"), [] { set_cuda_graphs(true); }, cuda_graphs_help());
}

// The data-parallel flags (mpirun/srun) of pretrain and finetune.
inline void add_data_parallel_flags(CLI::App* sub, bertcc::dist::Options& o) {
  sub->add_option(flag("--allreduce-dtype"), o.allreduce_dtype,
                  "data parallel: gradients on the wire as fp32 (default), bf16 or fp16 (compression)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  sub->add_option(flag("--bucket-cap-mb"), o.bucket_cap_mb,
                  "data parallel: gradient all-reduce bucket size in MB of fp32 (default 25, as PyTorch DDP)")
      ->check(in_range(0, 65536, "MB of fp32 per gradient bucket, each a buffer", true));
  sub->add_flag("--zero1", o.zero1,
                "data parallel: shard the optimizer moments across ranks (ZeRO stage 1); updated tensors are "
                "all-gathered; results identical to unsharded");
  sub->add_flag(
      flag("--no-allreduce-overlap"), [&o](int64_t) { o.allreduce_overlap = false; },
      "data parallel: reduce the gradients after backward instead of bucket by bucket during it");
  sub->add_option(flag("--allreduce-backend"), o.allreduce_backend,
                  "data parallel with --device cuda: gradients reduced GPU to GPU by nccl (auto's choice with "
                  "several ranks) or through the host's MPI communicator (host: e.g. two ranks sharing one GPU)")
      ->check(CLI::IsMember({"auto", "nccl", "host"}));
  sub->add_option(flag("--watchdog-timeout"), o.watchdog_timeout,
                  "data parallel: seconds without progress after which a rank ends the job (default 600, 0 = off)")
      ->check(in_range(0, 1e7, "seconds; 0 = off"));
}

void add_dump_step(CLI::App& app);
void add_bench(CLI::App& app);
void add_model_tools(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_create_data(CLI::App& app);
void add_prep_corpus(CLI::App& app);
void add_train_vocab(CLI::App& app);
void add_pretrain(CLI::App& app);
// pretrain's flags on `sub` (also lr-find pretrain's: range_test leaves out the rate, schedule,
// checkpoint, evaluation and log flags, which a range test has no use for)
void add_pretrain_flags(CLI::App* sub, PretrainOptions& o, bool range_test);
void add_plot(CLI::App& app);
void add_eval(CLI::App& app);
void add_finetune(CLI::App& app);
void add_lr_find(CLI::App& app);
void add_infer(CLI::App& app);
void add_serve(CLI::App& app);

}  // namespace bertcc::tools
