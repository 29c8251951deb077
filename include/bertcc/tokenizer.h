// BERT tokenizer with the semantics of Hugging Face's tokenizers (BertNormalizer +
// BertPreTokenizer + WordPiece), which follow Google's BasicTokenizer/WordpieceTokenizer:
//   clean text (drop NUL, U+FFFD and every C* character except \t \n \r; whitespace -> ' '),
//   CJK ideographs isolated, [uncased: NFD, drop Mn, lowercase per character],
//   split on whitespace and punctuation (ASCII punctuation and Unicode P*),
//   WordPiece greedy longest-match-first with "##", words over 100 characters -> [UNK].
// Special tokens present in the vocabulary ([PAD] [UNK] [CLS] [SEP] [MASK]) are matched in the
// raw text first and never split. Invalid UTF-8 bytes decode to U+FFFD (hence dropped) and are
// counted.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bertcc {

class Vocab {
 public:
  static Vocab load(const std::string& path);  // one token per line; errors name file and line
  static Vocab from_tokens(std::vector<std::string> tokens, const std::string& where);
  int32_t id(std::string_view token) const;  // -1 if absent
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t unk_id() const { return unk_; }
  // True when no entry outside [brackets] has an uppercase letter (an uncased vocabulary).
  bool looks_uncased() const;
  const std::string& source() const { return source_; }

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> index_;
  int32_t unk_ = -1;
  std::string source_;
};

struct TokenizeStats {
  int64_t invalid_utf8 = 0;  // bytes replaced by U+FFFD
  int64_t unknown = 0;       // [UNK] tokens produced
};

class BertTokenizer {
 public:
  BertTokenizer(const Vocab& vocab, bool lower_case);
  ~BertTokenizer();
  BertTokenizer(const BertTokenizer&) = delete;
  BertTokenizer& operator=(const BertTokenizer&) = delete;

  const Vocab& vocab() const { return vocab_; }
  bool lower_case() const { return lower_; }

  // Appends the ids of `text` (no [CLS]/[SEP]).
  void encode(std::string_view text, std::vector<int32_t>& ids, TokenizeStats* stats = nullptr) const;
  std::vector<int32_t> encode(std::string_view text) const;
  // Basic tokenization only (normalised words, before WordPiece), for SQuAD-style alignment.
  void basic_tokenize(std::string_view text, std::vector<std::string>& words, TokenizeStats* stats = nullptr) const;
  // Many texts, in parallel over `threads` OpenMP threads (0 = all); output order = input order.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string_view>& texts, int threads,
                                                 TokenizeStats* stats = nullptr) const;

 private:
  struct Impl;
  const Vocab& vocab_;
  bool lower_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertcc
