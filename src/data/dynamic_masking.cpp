#include "bertcc/dynamic_masking.h"

#include <hdf5.h>

#include <algorithm>
#include <cmath>

#include "bertcc/error.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/pyrandom.h"
#include "bertcc/rng.h"

namespace bertcc {
namespace {

uint32_t below(Rng& r, uint32_t n) {  // unbiased
  const uint32_t lim = UINT32_MAX - UINT32_MAX % n;
  uint32_t x;
  do x = r.next_u32();
  while (x >= lim);
  return x % n;
}

}  // namespace

// The HDF5 plumbing is shared with the masked layout: an unmasked shard is written as a
// PretrainShard whose masked_lm_* datasets are absent, plus `lengths`.
void write_unmasked_shard(const std::string& path, const UnmaskedShard& s) {
  PretrainShard p;
  p.N = s.N;
  p.S = s.S;
  p.P = 0;
  p.input_ids = s.input_ids;
  p.input_mask = s.input_mask;
  p.segment_ids = s.segment_ids;
  p.next_sentence_labels = s.next_sentence_labels;
  write_pretrain_shard_layout(path, p, &s.lengths);
}

UnmaskedShard unmasked_from(PretrainShard&& p, std::vector<int32_t> lengths) {
  UnmaskedShard s;
  s.N = p.N;
  s.S = p.S;
  s.input_ids = std::move(p.input_ids);
  s.input_mask = std::move(p.input_mask);
  s.segment_ids = std::move(p.segment_ids);
  s.next_sentence_labels = std::move(p.next_sentence_labels);
  s.lengths = std::move(lengths);
  return s;
}

UnmaskedShard read_unmasked_shard(const std::string& path, const std::vector<int64_t>* rows) {
  std::vector<int32_t> lengths;
  PretrainShard p = read_pretrain_shard_layout(path, &lengths, rows);
  UnmaskedShard s = unmasked_from(std::move(p), std::move(lengths));
  for (int64_t r = 0; r < s.N; ++r)
    BERTCC_CHECK(s.lengths[r] >= 2 && s.lengths[r] <= s.S, path, ": lengths[", rows ? (*rows)[r] : r,
                 "] = ", s.lengths[r], " outside [2, ", s.S, "]");
  return s;
}

bool is_unmasked_shard(const std::string& path) { return !pretrain_shard_has_masks(path); }

DynamicMasker::DynamicMasker(const MaskingOptions& o, uint64_t seed) : o_(o), seed_(seed) {
  BERTCC_CHECK(o.vocab_size > 0 && o.cls_id >= 0 && o.sep_id >= 0 && o.mask_id >= 0,
               "dynamic masking needs the vocabulary size and the [CLS], [SEP], [MASK] ids");
  BERTCC_CHECK(o.masked_lm_prob > 0 && o.masked_lm_prob < 1, "masked_lm_prob must be in (0, 1)");
}

void DynamicMasker::mask_row(const int32_t* ids, int64_t len, int64_t S, uint64_t epoch, uint64_t row, int32_t* out_ids,
                             int32_t* labels) const {
  Rng r{splitmix64(seed_ ^ splitmix64(epoch * 0x100000001B3ull ^ splitmix64(row))), 0};
  std::copy(ids, ids + S, out_ids);
  std::fill(labels, labels + S, -1);
  std::vector<int32_t> cand;
  for (int64_t i = 0; i < len; ++i)
    if (ids[i] != o_.cls_id && ids[i] != o_.sep_id) cand.push_back(static_cast<int32_t>(i));
  for (size_t i = cand.size(); i > 1; --i) std::swap(cand[i - 1], cand[below(r, static_cast<uint32_t>(i))]);
  const int64_t num = std::min<int64_t>(
      {o_.max_predictions_per_seq, std::max<int64_t>(1, round_half_even(static_cast<double>(len) * o_.masked_lm_prob)),
       static_cast<int64_t>(cand.size())});
  for (int64_t k = 0; k < num; ++k) {
    const int32_t i = cand[static_cast<size_t>(k)];
    labels[i] = ids[i];
    const float u = u32_to_unit(r.next_u32());
    if (u < o_.mask_below)
      out_ids[i] = o_.mask_id;
    else if (u >= o_.random_from)
      out_ids[i] = static_cast<int32_t>(below(r, static_cast<uint32_t>(o_.vocab_size)));
  }
}

BertBatch DynamicMasker::make_batch(const UnmaskedShard& s, const std::vector<int64_t>& rows, uint64_t epoch,
                                    const std::vector<int64_t>* ids) const {
  BertBatch b;
  b.B = static_cast<int64_t>(rows.size());
  b.T = s.S;
  const size_t S = static_cast<size_t>(s.S);
  b.input_ids.resize(rows.size() * S);
  b.mlm_labels.resize(rows.size() * S);
  for (size_t k = 0; k < rows.size(); ++k) {
    const size_t r = static_cast<size_t>(rows[k]);
    const auto id = ids ? static_cast<size_t>((*ids)[k]) : r;  // the row's number in the file: its masks' seed
    mask_row(s.input_ids.data() + r * S, s.lengths[r], s.S, epoch, id, b.input_ids.data() + k * S,
             b.mlm_labels.data() + k * S);
    b.input_mask.insert(b.input_mask.end(), s.input_mask.begin() + r * S, s.input_mask.begin() + (r + 1) * S);
    b.segment_ids.insert(b.segment_ids.end(), s.segment_ids.begin() + r * S, s.segment_ids.begin() + (r + 1) * S);
    b.nsp_labels.push_back(s.next_sentence_labels[r]);
  }
  return b;
}

std::vector<int64_t> epoch_order(const UnmaskedShard& s, uint64_t seed, uint64_t epoch, int64_t bin_size) {
  std::vector<int64_t> order(static_cast<size_t>(s.N));
  for (int64_t i = 0; i < s.N; ++i) order[static_cast<size_t>(i)] = i;
  Rng r{splitmix64(seed ^ splitmix64(~epoch)), 0};
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[below(r, static_cast<uint32_t>(i))]);
  if (bin_size > 1)
    for (size_t b = 0; b < order.size(); b += static_cast<size_t>(bin_size)) {
      const auto e =
          order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), b + static_cast<size_t>(bin_size)));
      std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(b), e,
                       [&](int64_t x, int64_t y) { return s.lengths[x] < s.lengths[y]; });
    }
  return order;
}

}  // namespace bertcc
