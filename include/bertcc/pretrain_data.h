// NVIDIA pre-training shards (HDF5): input_ids i4 [N,S], input_mask i1, segment_ids i1,
// masked_lm_positions i4 [N,P], masked_lm_ids i4 [N,P], next_sentence_labels i1 [N].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/batch.h"

namespace bertcc {

struct PretrainShard {
  int64_t N = 0, S = 0, P = 0;
  std::vector<int32_t> input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels;
};

// Reads a whole shard; errors name the file and the dataset.
PretrainShard read_pretrain_shard(const std::string& path);

// Rows [first, first+count) as a model batch. Masked-LM labels follow NVIDIA's loader: a row's
// position list ends at its first 0 entry; every other token is ignored (-1).
BertBatch make_pretrain_batch(const PretrainShard& shard, int64_t first, int64_t count, const std::string& where);
// The same for any rows, in the given order.
BertBatch make_pretrain_batch(const PretrainShard& shard, const std::vector<int64_t>& rows, const std::string& where);

// Writes a shard in the same layout (gzip level 4), atomically (used by tests and tools).
void write_pretrain_shard(const std::string& path, const PretrainShard& shard);

// Shared plumbing for the dynamic-masking layout: with `lengths`, the masked_lm_* datasets are
// skipped and a `lengths` dataset is written/read instead.
void write_pretrain_shard_layout(const std::string& path, const PretrainShard& shard,
                                 const std::vector<int32_t>* lengths);
// rows (sorted, distinct): only those rows, in that order (the result's N is rows->size()); the
// file is read a slab of rows at a time, so a data-parallel rank holds its rows, not the shard.
PretrainShard read_pretrain_shard_layout(const std::string& path, std::vector<int32_t>* lengths,
                                         const std::vector<int64_t>* rows = nullptr);
// The shard's row count, without reading its tokens; with `lengths`, each row's real tokens (the
// sum of its input_mask row), read a slab at a time.
int64_t probe_shard_rows(const std::string& path, std::vector<int32_t>* lengths = nullptr);
bool pretrain_shard_has_masks(const std::string& path);

// From now on, this process reads shards through a child process (`bertcc __hdf5-reader`, started
// on the first read): libhdf5 1.10 crashes inside itself on some malformed files, and a crash in the
// child is an error naming the file instead of the end of bertcc. The bertcc binary calls it at
// start-up; other programs (tests, fuzzers) read in-process.
void isolate_hdf5_reads();
// The child's main loop (stdin/stdout: the socket to its bertcc); returns the exit status.
int hdf5_reader_main();

}  // namespace bertcc
