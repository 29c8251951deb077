// Fine-tuning features: sentence (pair) encoding with Google's truncation, and padded batches.
#include "bertcc/features.h"

#include <algorithm>

#include "bertcc/error.h"

namespace bertcc {

void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_total) {
  while (a.size() + b.size() > max_total) {
    if (a.size() > b.size())
      a.pop_back();
    else
      b.pop_back();
  }
}

FtFeature encode_pair(const BertTokenizer& tok, std::string_view a, std::string_view b, int max_seq_length) {
  const Vocab& v = tok.vocab();
  const int32_t cls = v.id("[CLS]"), sep = v.id("[SEP]");
  BERTCC_CHECK(cls >= 0 && sep >= 0, v.source(), ": vocabulary has no [CLS] or [SEP]");
  std::vector<int32_t> ta = tok.encode(a), tb;
  const bool pair = !b.empty();
  if (pair) tb = tok.encode(b);
  if (pair)
    truncate_seq_pair(ta, tb, static_cast<size_t>(max_seq_length - 3));
  else if (ta.size() > static_cast<size_t>(max_seq_length - 2))
    ta.resize(static_cast<size_t>(max_seq_length - 2));
  FtFeature f;
  f.input_ids.push_back(cls);
  f.input_ids.insert(f.input_ids.end(), ta.begin(), ta.end());
  f.input_ids.push_back(sep);
  f.segment_ids.assign(f.input_ids.size(), 0);
  if (pair) {
    f.input_ids.insert(f.input_ids.end(), tb.begin(), tb.end());
    f.input_ids.push_back(sep);
    f.segment_ids.resize(f.input_ids.size(), 1);
  }
  return f;
}

int64_t padded_length(int64_t longest, int64_t max_len) {
  return std::min<int64_t>((longest + 7) / 8 * 8, std::max<int64_t>(max_len, longest));
}

BertBatch make_finetune_batch(const std::vector<FtFeature>& f, const std::vector<size_t>& idx, HeadLabels labels,
                              bool with_labels, int64_t max_len) {
  BertBatch b;
  b.B = static_cast<int64_t>(idx.size());
  int64_t T = 1;
  for (size_t i : idx) T = std::max<int64_t>(T, static_cast<int64_t>(f[i].input_ids.size()));
  T = padded_length(T, max_len);
  b.T = T;
  const size_t n = static_cast<size_t>(b.B * T);
  b.input_ids.assign(n, 0);
  b.segment_ids.assign(n, 0);
  b.input_mask.assign(n, 0);
  if (with_labels && labels == HeadLabels::Token) b.labels.assign(n, -100);
  for (int64_t r = 0; r < b.B; ++r) {
    const FtFeature& x = f[idx[static_cast<size_t>(r)]];
    const size_t L = x.input_ids.size();
    std::copy(x.input_ids.begin(), x.input_ids.end(), b.input_ids.begin() + r * T);
    std::copy(x.segment_ids.begin(), x.segment_ids.end(), b.segment_ids.begin() + r * T);
    std::fill(b.input_mask.begin() + r * T, b.input_mask.begin() + r * T + static_cast<int64_t>(L), 1);
    if (!with_labels) continue;
    switch (labels) {
      case HeadLabels::Token:
        std::copy(x.token_labels.begin(), x.token_labels.end(), b.labels.begin() + r * T);
        break;
      case HeadLabels::Span:
        b.start_positions.push_back(x.start);
        b.end_positions.push_back(x.end);
        break;
      default:
        b.labels.push_back(x.label);
        b.targets.push_back(x.target);
    }
  }
  return b;
}

}  // namespace bertcc
