// Tokenizer rules on a small vocabulary; the full comparison with Hugging Face tokenizers on real
// data is tests/tokenizer/check_hf.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "bertcc/error.h"
#include "bertcc/tokenizer.h"

using namespace bertcc;

namespace {
Vocab toy() {
  return Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un",   "##aff", "##able", "aff",
                             "able",  "hello", "world", ",",     "!",      "cafe", "naive", "北",     "京",
                             "a",     "##a",   "b",     "##b",   "Hello",  "##é",  "H",     "##llo",  "é"},
                            "toy");
}
std::vector<std::string> pieces(const BertTokenizer& t, const std::string& s) {
  std::vector<std::string> out;
  for (int32_t id : t.encode(s)) out.push_back(t.vocab().token(id));
  return out;
}
using V = std::vector<std::string>;
}  // namespace

TEST(Tokenizer, WordPieceGreedyLongestMatchFirst) {
  const Vocab v = toy();
  BertTokenizer t(v, true);
  EXPECT_EQ(pieces(t, "unaffable"), (V{"un", "##aff", "##able"}));
  EXPECT_EQ(pieces(t, "affable"), (V{"aff", "##able"}));
  EXPECT_EQ(pieces(t, "unaffablex"), (V{"[UNK]"}));  // one piece fails: the whole word is [UNK]
  EXPECT_EQ(pieces(t, "Hello, World!"), (V{"hello", ",", "world", "!"}));
}

TEST(Tokenizer, LowerCaseStripsAccentsCasedKeepsThem) {
  const Vocab v = toy();
  BertTokenizer lower(v, true), cased(v, false);
  EXPECT_EQ(pieces(lower, "Café NAÏVE"), (V{"cafe", "naive"}));
  EXPECT_EQ(pieces(cased, "Héllo"), (V{"H", "##é", "##llo"}));
  EXPECT_EQ(pieces(cased, "hello"), (V{"hello"}));
}

TEST(Tokenizer, CleaningCjkAndSpecialTokens) {
  const Vocab v = toy();
  BertTokenizer t(v, true);
  EXPECT_EQ(pieces(t, "hel\x01lo\tworld\u200b"), (V{"hello", "world"}));  // controls dropped, tab splits
  EXPECT_EQ(pieces(t, "北京hello"), (V{"北", "京", "hello"}));
  EXPECT_EQ(pieces(t, "hello[MASK]world"), (V{"hello", "[MASK]", "world"}));
  EXPECT_EQ(pieces(t, "[mask]"), (V{"[UNK]", "[UNK]", "[UNK]"}));  // not special once lowercased: '[' mask ']'
}

TEST(Tokenizer, LongWordsAndInvalidUtf8) {
  const Vocab v = toy();
  BertTokenizer t(v, true);
  EXPECT_EQ(t.encode(std::string(100, 'a')).size(), 100u);    // a ##a ... : 100 pieces
  EXPECT_EQ(pieces(t, std::string(101, 'a')), (V{"[UNK]"}));  // over 100 characters
  EXPECT_EQ(pieces(t, std::string(101, 'a') + " b"), (V{"[UNK]", "b"}));
  TokenizeStats st;
  std::vector<int32_t> ids;
  t.encode(
      "a\xff\xfe"
      "b \xc3",
      ids, &st);  // invalid bytes vanish (U+FFFD is dropped)
  EXPECT_EQ(st.invalid_utf8, 3);
  std::vector<std::string> got;
  for (int32_t id : ids) got.push_back(v.token(id));
  EXPECT_EQ(got, (V{"a", "##b"}));
}

TEST(Tokenizer, BatchEqualsSequential) {
  const Vocab v = toy();
  BertTokenizer t(v, true);
  std::vector<std::string> texts;
  for (int i = 0; i < 1000; ++i) texts.push_back(i % 3 ? "hello, world!" : "unaffable 北京 [MASK]");
  std::vector<std::string_view> views(texts.begin(), texts.end());
  const auto batch = t.encode_batch(views, 2);
  for (size_t i = 0; i < texts.size(); ++i) ASSERT_EQ(batch[i], t.encode(texts[i]));
}

TEST(Vocab, ErrorsAndCaseDetection) {
  EXPECT_TRUE(toy().looks_uncased() == false);  // "Hello", "H" are capitalised
  EXPECT_TRUE(Vocab::from_tokens({"[UNK]", "[CLS]", "a"}, "x").looks_uncased());
  try {
    Vocab::from_tokens({"a", "b"}, "my_vocab.txt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("my_vocab.txt: the vocabulary has no [UNK] token"), std::string::npos);
  }
  const auto path = std::filesystem::temp_directory_path() / "bertcc_vocab_blank.txt";
  std::ofstream(path) << "[UNK]\na\n\nb\n";
  try {
    Vocab::load(path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":3: empty vocabulary entry"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// LinMaxMatch vs the textbook greedy longest-match-first on random vocabularies and words over a
// tiny alphabet (many shared prefixes, many failures).
static std::vector<std::string> naive_wordpiece(const std::string& w, const std::set<std::string>& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < w.size()) {
    size_t end = w.size();
    std::string cur;
    for (; end > start; --end) {
      cur = (start ? "##" : "") + w.substr(start, end - start);
      if (v.count(cur)) break;
    }
    if (end == start) return {"[UNK]"};
    out.push_back(cur);
    start = end;
  }
  return out;
}

TEST(Tokenizer, LinMaxMatchEqualsNaiveGreedyOnRandomVocabularies) {
  std::mt19937 g(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::set<std::string> vs{"[UNK]"};
    const int n = 3 + int(g() % 25);
    for (int i = 0; i < n; ++i) {
      std::string t;
      const int len = 1 + int(g() % 4);
      for (int k = 0; k < len; ++k) t.push_back("abc"[g() % 3]);
      vs.insert(g() % 2 ? "##" + t : t);
    }
    const Vocab v = Vocab::from_tokens(std::vector<std::string>(vs.begin(), vs.end()), "random");
    BertTokenizer t(v, false);
    for (int k = 0; k < 50; ++k) {
      std::string w;
      const int len = 1 + int(g() % 9);
      for (int c = 0; c < len; ++c) w.push_back("abc"[g() % 3]);
      ASSERT_EQ(pieces(t, w), naive_wordpiece(w, vs)) << "word " << w << " trial " << trial;
    }
  }
}
