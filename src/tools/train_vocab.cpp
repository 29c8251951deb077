// bertcc train-vocab: WordPiece vocabulary from text files, in BERT's vocab.txt layout.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/tokenizer.h"
#include "bertcc/vocab_trainer.h"
#include "tools/cli_common.h"

namespace bertcc::tools {
namespace fs = std::filesystem;

void add_train_vocab(CLI::App& app) {
  struct Opts {
    std::vector<std::string> inputs;
    std::string output;
    bool cased = false, lower = false;
    VocabTrainerOptions t;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("train-vocab", "Train a WordPiece vocabulary (BERT vocab.txt layout) from text");
  sub->add_option("--input", o->inputs, "text files or folders (comma-separated or repeated)")
      ->required()
      ->delimiter(',');
  sub->add_option("--output", o->output, "vocab.txt to write")->required();
  sub->add_option(flag("--vocab-size"), o->t.vocab_size, "total size including special tokens (default 30522)")
      ->check(in_range(6, 4000000, "entries of the vocabulary; the largest real ones have about 250,000"));
  sub->add_flag(flag("--do-lower-case"), o->lower, "lower-case and strip accents, as uncased BERT (the default)");
  sub->add_flag(flag("--no-lower-case", {"--cased"}), o->cased, "keep case and accents (a cased vocabulary)");
  sub->add_option(flag("--min-frequency"), o->t.min_frequency, "minimum pair count to merge (default 2)")
      ->check(in_range(1, 1e15, "a count"));
  sub->add_option(flag("--limit-alphabet"), o->t.limit_alphabet, "most frequent characters kept (default 1000)")
      ->check(in_range(1, 1114112, "characters; Unicode has 1,114,112 code points"));
  sub->add_option(flag("--num-unused"), o->t.num_unused, "[unused*] slots after [PAD] (default 99)")
      ->check(in_range(0, 100000, "[unused] slots, each a vocabulary entry"));
  sub->add_option("--threads", o->threads, "threads (default: all cores)")->check(threads_check());
  sub->callback([o]() {
    const auto t0 = std::chrono::steady_clock::now();
    BERTCC_CHECK(!(o->lower && o->cased), "--do-lower-case and --no-lower-case contradict each other");
    std::vector<std::string> files;
    for (const auto& in : o->inputs) {
      BERTCC_CHECK(fs::exists(in), in, ": no such file or folder");
      check_output_not_input(o->output, "--output", in, "--input", /*input_read_whole=*/true);
      if (fs::is_directory(in)) {
        std::vector<std::string> found;
        for (const auto& e : fs::recursive_directory_iterator(in))
          if (e.is_regular_file() && !is_temp_file_name(e.path().string())) found.push_back(e.path().string());
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
      } else {
        files.push_back(in);
      }
    }
    BERTCC_CHECK(!files.empty(), "train-vocab: no input files");
    const Vocab specials = Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}, "built-in");
    BertTokenizer basic(specials, !o->cased);
    const int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
    std::vector<WordCounts> per(files.size());
    std::vector<std::string> err(files.size());
    std::vector<int64_t> invalid(files.size(), 0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (size_t f = 0; f < files.size(); ++f) {
      try {
        std::ifstream in;
        open_text_input(in, files[f]);
        std::string line;
        std::vector<std::string> words;
        TokenizeStats st;
        for (bool first = true; std::getline(in, line); first = false) {
          if (first) strip_text_bom(line, files[f]);
          words.clear();
          basic.basic_tokenize(line, words, &st);
          for (auto& w : words)
            if (specials.id(w) < 0) ++per[f][w];
        }
        BERTCC_CHECK(!in.bad(), files[f], ": read error");
        invalid[f] = st.invalid_utf8;
      } catch (const std::exception& e) {
        err[f] = e.what();
      }
    }
    WordCounts all;
    int64_t bad = 0;
    for (size_t f = 0; f < files.size(); ++f) {
      BERTCC_CHECK(err[f].empty(), err[f]);
      for (const auto& [w, c] : per[f]) all[w] += c;
      per[f].clear();
      bad += invalid[f];
    }
    BERTCC_CHECK(!all.empty(), "train-vocab: the input has no words");
    const auto vocab = train_wordpiece(all, o->t);
    std::string text;
    for (const auto& t : vocab) text += t + "\n";
    write_file_atomic(o->output, text);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "train-vocab: " << files.size() << " file(s), " << all.size() << " distinct words -> " << vocab.size()
              << " tokens (" << (o->cased ? "cased" : "uncased") << ") in " << o->output << ", " << secs << " s\n";
    if (bad) std::cerr << "train-vocab: " << bad << " invalid UTF-8 byte(s) replaced (dropped)\n";
  });
}

}  // namespace bertcc::tools
