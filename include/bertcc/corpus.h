// Corpus preparation: English sentence segmentation and sharding into Google's input format
// (one sentence per line, a blank line between documents).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bertcc {

// Rule-based English sentence segmentation in the spirit of NLTK's Punkt (which NVIDIA used):
// boundaries after . ? ! (and … ...) with optional closing quotes/brackets, when the next word
// starts with an uppercase letter, a digit or an opening quote/bracket. No boundary after known
// titles (Mr. Dr. St. ...), single-letter initials (J. R. R.), dotted acronyms (U.S. e.g.) or a
// decimal point. Unlike Punkt it learns no abbreviations from the corpus.
std::vector<std::string> split_sentences(std::string_view paragraph);

// A plain-text document: paragraphs separated by blank lines; lines inside a paragraph are
// joined (hard-wrapped text), then segmented. Returns sentences in order.
std::vector<std::string> segment_document(std::string_view text);

// Replaces invalid UTF-8 sequences by U+FFFD in place; returns how many were replaced.
int64_t sanitize_utf8(std::string& s);

// `bertcc prep-corpus`: text files and folders (each file one document) and Wikipedia XML dumps
// (each article one document) -> sentence-segmented documents in `shards` size-balanced train
// shards (OUTPUT/train/part-NNNNN.txt) and held-out test shards (OUTPUT/test), a document held out
// with probability `test_fraction` (seeded). Shards are written to temporary names and renamed
// when all are complete; on any failure none is left, nor a folder the run made. The output
// folder is locked (RunLock) while the run writes it.
struct CorpusPrepOptions {
  std::vector<std::string> inputs;  // files, folders (.txt, .text or no extension; recursive), dumps
  std::string output;
  int shards = 4;
  double test_fraction = 0.0;
  uint64_t seed = 12345;
  int threads = 0;              // documents segmented in parallel; 0: one thread
  double stream_above_mb = 64;  // text files above this are read paragraph by paragraph
};
struct CorpusPrepResult {
  int64_t docs = 0, held_out = 0, sentences = 0, empty_docs = 0, invalid_utf8 = 0;
  size_t train_shards = 0, test_shards = 0;
};
// Progress goes to stderr; errors name the file and what to change.
CorpusPrepResult prepare_corpus(const CorpusPrepOptions& o);

}  // namespace bertcc
