#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace bertcc::tools {

// NVIDIA's flag names in dash form, with the underscore spelling as an alias: "--train-batch-size"
// becomes "--train-batch-size,--train_batch_size".
inline std::string flag(const std::string& dashed) {
  std::string under = dashed;
  for (size_t i = 2; i < under.size(); ++i)
    if (under[i] == '-') under[i] = '_';
  return under == dashed ? dashed : dashed + "," + under;
}

void add_dump_step(CLI::App& app);
void add_bench(CLI::App& app);
void add_model_tools(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_create_data(CLI::App& app);
void add_prep_corpus(CLI::App& app);
void add_train_vocab(CLI::App& app);
void add_pretrain(CLI::App& app);
void add_plot(CLI::App& app);
void add_eval(CLI::App& app);
void add_finetune(CLI::App& app);
void add_infer(CLI::App& app);

}  // namespace bertcc::tools
