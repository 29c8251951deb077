// bertcc tokenize: one output line of token ids (or tokens) per input line; [CLS] and [SEP]
// around each with --add-special-tokens (Hugging Face's add_special_tokens=True).
#include <cstdio>
#include <fstream>
#include <iostream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/runtime.h"
#include "bertcc/tokenizer.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

bool parse_bool_flag(const std::string& name, const std::string& v) {
  if (v == "true" || v == "True" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "False" || v == "0" || v == "no") return false;
  fail(name, ": expected true or false, got '", v, "'");
}

void add_tokenize(CLI::App& app) {
  struct Opts {
    std::string vocab, lower, input;
    bool tokens = false, special = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("tokenize", "BERT WordPiece tokenization of UTF-8 lines (HF BertTokenizer semantics)");
  sub->add_option("--vocab", o->vocab, "vocab.txt")->required();
  add_casing_flags(sub, o->lower);
  sub->add_option("--input", o->input, "input file (default: standard input)");
  sub->add_flag("--tokens", o->tokens, "print tokens instead of ids");
  sub->add_flag(flag("--add-special-tokens"), o->special,
                "put [CLS] before and [SEP] after each line's pieces, as the model sees a single text (Hugging Face's "
                "add_special_tokens=True; default: the pieces alone)");
  sub->add_option("--threads", o->threads, "threads (default: all cores)")->check(threads_check());
  sub->callback([o]() {
    const Vocab vocab = Vocab::load(o->vocab);
    const bool lower = o->lower.empty() ? vocab.looks_uncased() : parse_bool_flag("--do-lower-case", o->lower);
    BertTokenizer tok(vocab, lower);
    int32_t cls = -1, sep = -1;
    if (o->special) {
      cls = vocab.id("[CLS]");
      sep = vocab.id("[SEP]");
      BERTCC_CHECK(cls >= 0 && sep >= 0, o->vocab, ": --add-special-tokens needs [CLS] and [SEP] in the vocabulary");
    }
    std::ifstream file;
    std::istream* in = &std::cin;
    if (!o->input.empty()) {
      open_text_input(file, o->input);
      in = &file;
    } else {
      check_stdin_not_directory();
    }
    std::ios::sync_with_stdio(false);
    TokenizeStats stats;
    std::vector<std::string> lines;
    std::string line, out;
    size_t bytes = 0;
    auto run = [&]() {
      std::vector<std::string_view> views(lines.begin(), lines.end());
      const auto ids = tok.encode_batch(views, o->threads, &stats);
      out.clear();
      for (auto row : ids) {
        if (o->special) {
          row.insert(row.begin(), cls);
          row.push_back(sep);
        }
        for (size_t k = 0; k < row.size(); ++k) {
          if (k) out.push_back(' ');
          if (o->tokens) out += vocab.token(row[k]);
          else out += std::to_string(row[k]);
        }
        out.push_back('\n');
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
      lines.clear();
      bytes = 0;
    };
    const std::string name = o->input.empty() ? "<stdin>" : o->input;
    for (bool first = true; std::getline(*in, line); first = false) {  // bounded memory: chunks of ~8 MB of text
      if (first) strip_text_bom(line, name);
      bytes += line.size();
      lines.push_back(std::move(line));
      if (bytes > (8u << 20)) run();
    }
    BERTCC_CHECK(!in->bad(), name, ": read error");
    if (o->input.empty()) check_stdin_read(*in);
    run();
    std::fflush(stdout);
    if (stats.invalid_utf8)
      std::cerr << "tokenize: " << (o->input.empty() ? "<stdin>" : o->input) << ": " << stats.invalid_utf8
                << " invalid UTF-8 byte(s) replaced by U+FFFD (dropped)\n";
  });
}

}  // namespace bertcc::tools
