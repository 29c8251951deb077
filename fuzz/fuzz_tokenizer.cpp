// BERT tokenization of arbitrary bytes (normalisation, pre-tokenization, specials, WordPiece) with
// a fixed vocabulary: $BERTCC_FUZZ_VOCAB (run.sh passes bert-base-uncased from ../shared/data) or
// a small built-in one. Every id must index the vocabulary.
#include <cstdlib>
#include <memory>
#include <vector>

#include "bertcc/tokenizer.h"
#include "fuzz_common.h"

namespace {
struct Fixture {
  std::unique_ptr<bertcc::Vocab> vocab;
  std::unique_ptr<bertcc::BertTokenizer> lower, cased;
  Fixture() {
    const char* path = std::getenv("BERTCC_FUZZ_VOCAB");
    vocab = std::make_unique<bertcc::Vocab>(
        path ? bertcc::Vocab::load(path)
             : bertcc::Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "##s", "world", "un",
                                           "##aff", "##able", "caf", "##e", "!", "\xe4\xbd\xa0"},
                                          "built-in"));
    lower = std::make_unique<bertcc::BertTokenizer>(*vocab, true);
    cased = std::make_unique<bertcc::BertTokenizer>(*vocab, false);
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fx;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bertcc::fuzz::expect_ok_or_error([&] {
    for (const bertcc::BertTokenizer* tok : {fx.lower.get(), fx.cased.get()}) {
      for (int32_t id : tok->encode(text))
        if (id < 0 || id >= fx.vocab->size()) __builtin_trap();
      std::vector<std::string> words;
      tok->basic_tokenize(text, words);
    }
  });
  return 0;
}
