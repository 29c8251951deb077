// Token classification features on words (see token_classification.h).
#include "bertcc/token_classification.h"

#include <utility>

#include "bertcc/error.h"

namespace bertcc {

NerFeatures ner_features(const BertTokenizer& tok, const std::vector<NerSentence>& sents,
                         const std::map<std::string, int32_t>& index, bool with_labels, int max_len,
                         const std::string& path) {
  const int32_t cls = tok.vocab().id("[CLS]"), sep = tok.vocab().id("[SEP]");
  BERTCC_CHECK(cls >= 0 && sep >= 0, tok.vocab().source(), ": vocabulary has no [CLS] or [SEP]");
  NerFeatures out;
  const size_t room = static_cast<size_t>(max_len - 2);
  for (size_t si = 0; si < sents.size(); ++si) {
    const NerSentence& s = sents[si];
    std::vector<std::vector<int32_t>> pieces(s.words.size());
    for (size_t w = 0; w < s.words.size(); ++w) {
      pieces[w] = tok.encode(s.words[w]);
      if (pieces[w].size() > room) pieces[w].resize(room);  // a single absurdly long word
    }
    size_t w = 0;
    do {
      FtFeature f;
      f.input_ids.push_back(cls);
      f.token_labels.push_back(-100);
      std::vector<int32_t> pos;
      const size_t first = w;
      while (w < s.words.size() && f.input_ids.size() - 1 + pieces[w].size() <= room) {
        pos.push_back(pieces[w].empty() ? -1 : static_cast<int32_t>(f.input_ids.size()));
        for (size_t k = 0; k < pieces[w].size(); ++k) {
          f.input_ids.push_back(pieces[w][k]);
          int32_t lab = -100;
          if (k == 0 && with_labels) {
            auto it = index.find(s.tags[w]);
            BERTCC_CHECK(it != index.end(), path, ":", s.line, ": tag '", s.tags[w],
                         "' is not one of the model's labels");
            lab = it->second;
          }
          f.token_labels.push_back(lab);
        }
        ++w;
      }
      f.input_ids.push_back(sep);
      f.token_labels.push_back(-100);
      f.segment_ids.assign(f.input_ids.size(), 0);
      out.f.push_back(std::move(f));
      out.sentence.push_back(si);
      out.first_word.push_back(first);
      out.word_pos.push_back(std::move(pos));
    } while (w < s.words.size());
  }
  return out;
}

}  // namespace bertcc
