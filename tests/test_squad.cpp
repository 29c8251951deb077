// SQuAD feature creation and decoding on the real dev sets: with "oracle" logits that point at
// the feature's training span, the whole pipeline (whitespace words, sub-token alignment,
// improved spans, sliding windows, max-context, n-best, get_final_text) must give back the gold
// answers, scored by the official evaluation.
#include <gtest/gtest.h>

#include <filesystem>

#include "bertcc/fileio.h"
#include "bertcc/squad.h"
#include "bertcc/squad_eval.h"

namespace bertcc {
namespace {

const std::string kShared = std::string(BERTCC_SOURCE_DIR) + "/../shared/data";

nlohmann::ordered_json oracle_run(const std::string& dev, const std::string& vocab_path, int max_seq, int stride,
                                  bool v2, size_t* nfeat) {
  const Vocab vocab = Vocab::load(vocab_path);
  BertTokenizer tok(vocab, true);
  int64_t skipped = 0;
  const auto ex = read_squad(dev, /*training=*/true, nullptr, &skipped);
  SquadFeatureOptions fo;
  fo.max_seq_length = max_seq;
  fo.doc_stride = stride;
  const auto feats = squad_features(tok, ex, fo, true);
  *nfeat = feats.inputs.size();
  std::vector<std::vector<float>> logits(feats.inputs.size());
  for (size_t i = 0; i < feats.inputs.size(); ++i) {
    const FtFeature& f = feats.inputs[i];
    logits[i].assign(2 * f.input_ids.size(), -4.0f);
    logits[i][2 * static_cast<size_t>(f.start)] = 6.0f;
    logits[i][2 * static_cast<size_t>(f.end) + 1] = 6.0f;
  }
  SquadDecodeOptions d;
  d.v2 = v2;
  const SquadOutput out = squad_decode(tok, ex, feats, logits, d);
  const auto dir = std::filesystem::temp_directory_path() / ("bertcc_squad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_file_atomic((dir / "pred.json").string(), out.predictions.dump());
  auto r = evaluate_squad(dev, (dir / "pred.json").string());
  r["skipped"] = skipped;
  r["examples"] = ex.size();
  std::filesystem::remove_all(dir);
  return r;
}

TEST(Squad, OracleLogitsRecoverGoldAnswersV11) {
  size_t nf = 0;
  // Short windows force many contexts into several overlapping features.
  const auto r = oracle_run(kShared + "/squad/v1.1/dev-v1.1.json", kShared + "/bert_vocab/bert-base-uncased-vocab.txt",
                            128, 48, false, &nf);
  std::cout << r.dump() << " features " << nf << "\n";
  EXPECT_EQ(r["examples"].get<int64_t>() + r["skipped"].get<int64_t>(), 10570);
  EXPECT_GT(nf, 2 * r["examples"].get<size_t>());
  EXPECT_GT(r["exact_match"].get<double>(), 99.0);
  EXPECT_GT(r["f1"].get<double>(), 99.5);
}

TEST(Squad, OracleLogitsRecoverGoldAnswersV20) {
  size_t nf = 0;
  const auto r = oracle_run(kShared + "/squad/v2.0/dev-v2.0.first5articles.json",
                            kShared + "/bert_vocab/bert-base-uncased-vocab.txt", 384, 128, true, &nf);
  std::cout << r.dump() << " features " << nf << "\n";
  EXPECT_EQ(r["NoAns_exact"].get<double>(), 100.0);  // every impossible question answered with ""
  EXPECT_GT(r["HasAns_exact"].get<double>(), 99.0);
}

TEST(Squad, WhitespaceWordsAndFinalText) {
  const auto e = make_squad_example("x", "q", "  The  Nobel\u202fPrize\n(1921) ");
  ASSERT_EQ(e.doc_tokens.size(), 4u);
  EXPECT_EQ(e.doc_tokens[1], "Nobel");
  EXPECT_EQ(e.word_byte_begin[3], e.context.find("(1921)"));
  const Vocab vocab = Vocab::load(kShared + "/bert_vocab/bert-base-uncased-vocab.txt");
  BertTokenizer tok(vocab, true);
  // Google's example: the prediction "steve smith" maps back onto "Steve Smith's" -> "Steve Smith".
  EXPECT_EQ(get_final_text(tok, "steve smith", "Steve Smith's"), "Steve Smith");
  EXPECT_EQ(get_final_text(tok, "1921", "(1921)"), "1921");
  EXPECT_EQ(get_final_text(tok, "not there", "(1921)"), "(1921)");
}

}  // namespace
}  // namespace bertcc
