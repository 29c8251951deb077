// A small pre-training shard in NVIDIA's layout for loader tests: row r of shard idx holds the
// token 1000 * idx + r + 1 (so a batch tells which rows it got) over a length that varies by row.
#pragma once
#include <string>

#include "bertcc/pretrain_data.h"

namespace bertcc::testing {

inline std::string make_shard(const std::string& dir, int idx, int64_t N, int64_t S) {
  PretrainShard s;
  s.N = N;
  s.S = S;
  s.P = 2;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t len = 4 + (r * 5 + idx) % (S - 4);
    for (int64_t t = 0; t < S; ++t) {
      s.input_ids.push_back(t < len ? int32_t(1000 * idx + r + 1) : 0);  // row id in the tokens
      s.input_mask.push_back(t < len);
      s.segment_ids.push_back(0);
    }
    s.masked_lm_positions.insert(s.masked_lm_positions.end(), {1, 0});
    s.masked_lm_ids.insert(s.masked_lm_ids.end(), {7, 0});
    s.next_sentence_labels.push_back(0);
  }
  const std::string p = dir + "/s" + std::to_string(idx) + ".h5";
  write_pretrain_shard(p, s);
  return p;
}

}  // namespace bertcc::testing
