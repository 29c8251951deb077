// bertcc create-pretraining-data: Google's/NVIDIA's algorithm, NVIDIA's HDF5 output.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "bertcc/create_pretraining.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/run_lock.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

bool parse_bool_flag(const std::string& name, const std::string& v);

void add_create_data(CLI::App& app) {
  struct Opts {
    std::string input, output, vocab, lower;
    PretrainingDataOptions d;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "create-pretraining-data",
      "Masked-LM/NSP pre-training instances from text (one sentence per line, blank line between documents) "
      "into NVIDIA's HDF5 layout, with Google's algorithm and Python-identical random choices");
  sub->add_option("--input", o->input,
                  "text file, comma-separated files (one output), or a folder (one output per file, in parallel)")
      ->required();
  sub->add_option(flag("--output", {"--output-dir"}), o->output,
                  "output .h5 (or a folder when --input is a folder; --output-dir is accepted too)")
      ->required();
  sub->add_option("--vocab", o->vocab, "vocab.txt")->required();
  add_casing_flags(sub, o->lower);
  sub->add_option(flag("--max-seq-length"), o->d.max_seq_length, "default 128")
      ->check(in_range(5, 100000, "tokens per sequence"));
  sub->add_option(flag("--max-predictions-per-seq"), o->d.max_predictions_per_seq, "default 20")
      ->check(in_range(1, 100000, "masked positions per sequence"));
  sub->add_option(flag("--masked-lm-prob"), o->d.masked_lm_prob, "default 0.15")
      ->check(in_range(0, 1, "a probability"));
  sub->add_option(flag("--short-seq-prob"), o->d.short_seq_prob, "default 0.1")->check(in_range(0, 1, "a probability"));
  sub->add_option(flag("--dupe-factor"), o->d.dupe_factor, "default 10")
      ->check(in_range(1, 1000, "copies of the corpus made, each one's instances held in memory"));
  sub->add_option(flag("--seed", {"--random-seed"}), o->d.random_seed, "default 12345 (Google's --random-seed)")
      ->check(in_range(0, kMaxSeed, "a seed"));
  sub->add_flag(flag("--whole-word-mask"), o->d.whole_word_mask, "mask whole words (all their ## pieces)");
  sub->add_flag(flag("--dynamic-masking"), o->d.dynamic_masking,
                "write unmasked sequence pairs with lengths; the loader masks them anew each epoch");
  sub->add_option("--threads", o->threads, "parallel files when --input is a folder (default: all cores)")
      ->check(threads_check());
  sub->callback([o]() {
    namespace fs = std::filesystem;
    const auto t0 = std::chrono::steady_clock::now();
    check_output_not_input(o->output, "--output", o->vocab, "--vocab");
    const Vocab vocab = Vocab::load(o->vocab);
    const bool lower = o->lower.empty() ? vocab.looks_uncased() : parse_bool_flag("--do-lower-case", o->lower);
    BertTokenizer tok(vocab, lower);
    // One job = (input files, output file).
    std::vector<std::pair<std::vector<std::string>, std::string>> jobs;
    FoldersMade output_made;  // a new --output folder is removed again if the run is refused
    RunLock lock;             // (after output_made: released before the folder is removed)
    if (fs::is_directory(o->input)) {
      check_output_not_input(o->output, "--output", o->input, "--input", /*input_read_whole=*/true);
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(o->input))
        if (e.is_regular_file() && !is_temp_file_name(e.path().string())) files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      BERTCC_CHECK(!files.empty(), o->input, ": no input files in the folder");
      output_made.make(o->output);
      lock = RunLock(o->output, "--output", "create-pretraining-data");
      for (const auto& f : files) jobs.push_back({{f}, (fs::path(o->output) / fs::path(f).stem()).string() + ".h5"});
    } else {
      std::vector<std::string> files;
      size_t start = 0;
      while (start <= o->input.size()) {
        size_t comma = o->input.find(',', start);
        if (comma == std::string::npos) comma = o->input.size();
        if (comma > start) files.push_back(o->input.substr(start, comma - start));
        start = comma + 1;
      }
      for (const auto& f : files) {
        BERTCC_CHECK(fs::is_regular_file(f), f, ": no such input file");
        check_output_not_input(o->output, "--output", f, "--input");
      }
      // the output's folder, as the other commands make theirs (removed again if the run fails)
      if (const fs::path parent = fs::path(o->output).parent_path(); !parent.empty()) output_made.make(parent);
      jobs.push_back({files, o->output});
    }
    const int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
    std::vector<std::string> errors(jobs.size());
    std::vector<int64_t> counts(jobs.size(), 0), docs_n(jobs.size(), 0);
    std::vector<TokenizeStats> st(jobs.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (size_t j = 0; j < jobs.size(); ++j) {
      try {
        std::vector<Document> docs;
        for (const auto& f : jobs[j].first) read_documents(f, tok, docs, &st[j]);
        for (const auto& d : docs) docs_n[j] += !d.empty();
        PyRandom rng(o->d.random_seed);
        const auto inst = create_training_instances(std::move(docs), vocab, o->d, rng);
        BERTCC_CHECK(!inst.empty(), jobs[j].first[0], ": no text to make pre-training instances from");
        if (o->d.dynamic_masking)
          write_unmasked_shard(jobs[j].second, instances_to_unmasked_shard(inst, o->d));
        else
          write_pretrain_shard(jobs[j].second, instances_to_shard(inst, o->d));
        counts[j] = static_cast<int64_t>(inst.size());
      } catch (const std::exception& e) {
        errors[j] = e.what();
      }
    }
    for (const auto& e : errors) BERTCC_CHECK(e.empty(), e);
    int64_t total = 0, total_docs = 0, invalid = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      total += counts[j];
      total_docs += docs_n[j];
      invalid += st[j].invalid_utf8;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "create-pretraining-data: " << total_docs << " documents -> " << total << " instances in "
              << jobs.size() << " file(s) (" << (jobs.size() == 1 ? jobs[0].second : o->output) << "), " << secs
              << " s\n";
    if (invalid) std::cerr << "create-pretraining-data: " << invalid << " invalid UTF-8 byte(s) ignored\n";
  });
}

}  // namespace bertcc::tools
