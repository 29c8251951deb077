// bertcc tokenize: one output line of token ids (or tokens) per input line; [CLS] and [SEP]
// around each with --add-special-tokens (Hugging Face's add_special_tokens=True); --pair reads
// TEXT<TAB>PAIR lines, --json writes the model's inputs (input_ids, token_type_ids, attention_mask).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bertcc/error.h"
#include "bertcc/features.h"
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

namespace {
struct TokenizeCli {
  std::string vocab, lower, input;
  bool tokens = false, special = false, pair = false, json = false;
  int threads = 0, max_seq_length = 0;
};
void run_tokenize(TokenizeCli* o);
}  // namespace

void add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeCli>();
  auto* sub = app.add_subcommand("tokenize", "BERT WordPiece tokenization of UTF-8 lines (HF BertTokenizer semantics)");
  sub->add_option("--vocab", o->vocab, "vocab.txt")->required();
  add_casing_flags(sub, o->lower);
  sub->add_option("--input", o->input, "input file (default: standard input)");
  sub->add_flag("--tokens", o->tokens, "print tokens instead of ids");
  sub->add_flag(flag("--add-special-tokens"), o->special,
                "put [CLS] before and [SEP] after each line's pieces, as the model sees a single text (Hugging Face's "
                "add_special_tokens=True; default: the pieces alone)");
  sub->add_flag("--pair", o->pair,
                "each line is TEXT<TAB>TEXT_PAIR: [CLS] text [SEP] pair [SEP], as the model sees a pair (Hugging "
                "Face's tokenizer(text, text_pair)); implies --add-special-tokens");
  sub->add_flag("--json", o->json,
                "one JSON object per line with input_ids, token_type_ids and attention_mask, the inputs of "
                "serve's /v2/models/NAME/infer (implies --add-special-tokens)");
  sub->add_option(flag("--max-seq-length"), o->max_seq_length,
                  "with --pair or --json: truncate to this many tokens as fine-tuning does (the longer text "
                  "first; default 0: no truncation)")
      ->check(in_range(0, 1 << 24, "tokens per line; 0 = no truncation"));
  sub->add_option("--threads", o->threads, "threads (default: all cores)")->check(threads_check());
  sub->callback([o]() { run_tokenize(o.get()); });
}

namespace {
void run_tokenize(TokenizeCli* o) {
  if (o->pair || o->json) o->special = true;
  BERTCC_CHECK(o->max_seq_length == 0 || o->special, "--max-seq-length is for --pair, --json or --add-special-tokens");
  BERTCC_CHECK(o->max_seq_length == 0 || o->max_seq_length >= 3, "--max-seq-length ", o->max_seq_length,
               ": needs room for [CLS] and two [SEP] (at least 3)");
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
  // [CLS] a [SEP] (b [SEP]) with its segment ids, as fine-tuning and serve's text endpoints build them
  auto features = [&]() {
    std::vector<FtFeature> f(lines.size());
    const int max_len = o->max_seq_length > 0 ? o->max_seq_length : 1 << 30;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string_view l = lines[i];
      const size_t tab = o->pair ? l.find('\t') : std::string_view::npos;
      f[i] = tab == std::string_view::npos ? encode_pair(tok, l, {}, max_len)
                                           : encode_pair(tok, l.substr(0, tab), l.substr(tab + 1), max_len);
    }
    return f;
  };
  auto run = [&]() {
    std::vector<std::string_view> views(lines.begin(), lines.end());
    std::vector<FtFeature> f;
    if (o->pair || o->json || o->max_seq_length > 0) {
      f = features();
    } else {
      for (auto& row : tok.encode_batch(views, o->threads, &stats)) {
        if (o->special) {
          row.insert(row.begin(), cls);
          row.push_back(sep);
        }
        FtFeature x;
        x.input_ids = std::move(row);
        f.push_back(std::move(x));
      }
    }
    out.clear();
    for (const FtFeature& x : f) {
      if (o->json) {
        nlohmann::ordered_json j;
        j["input_ids"] = x.input_ids;
        j["token_type_ids"] = x.segment_ids;
        j["attention_mask"] = std::vector<int>(x.input_ids.size(), 1);
        if (o->tokens) {
          std::vector<std::string> t;
          for (int32_t id : x.input_ids) t.push_back(vocab.token(id));
          j["tokens"] = t;
        }
        out += j.dump();
      } else {
        for (size_t k = 0; k < x.input_ids.size(); ++k) {
          if (k) out.push_back(' ');
          if (o->tokens)
            out += vocab.token(x.input_ids[k]);
          else
            out += std::to_string(x.input_ids[k]);
        }
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
}
}  // namespace

}  // namespace bertcc::tools
