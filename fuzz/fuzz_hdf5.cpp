// Pre-training shards (HDF5): NVIDIA's masked layout and the dynamic-masking layout are read, every
// row is turned into a batch and validated against a small config, and dynamic-masking rows are
// masked, as the pre-training loader does. libhdf5 parses the file; bertcc's readers and checks
// must turn whatever it returns into an Error or a valid batch.
#include "bertcc/config.h"
#include "bertcc/dynamic_masking.h"
#include "bertcc/pretrain_data.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bertcc::fuzz::as_file(data, size, ".h5");
  bertcc::BertConfig cfg;
  cfg.vocab_size = 120;
  cfg.hidden_size = 8;
  cfg.num_hidden_layers = 1;
  cfg.num_attention_heads = 2;
  cfg.intermediate_size = 16;
  cfg.max_position_embeddings = 64;
  bertcc::fuzz::expect_ok_or_error([&] {
    if (bertcc::is_unmasked_shard(path)) {
      const bertcc::UnmaskedShard s = bertcc::read_unmasked_shard(path);
      bertcc::MaskingOptions o;
      o.vocab_size = cfg.vocab_size;
      o.cls_id = 2;
      o.sep_id = 3;
      o.mask_id = 4;
      const bertcc::DynamicMasker m(o, 7);
      for (int64_t r = 0; r < s.N && r < 64; ++r) m.make_batch(s, {r}, 0).validate(cfg, path);
    } else {
      const bertcc::PretrainShard s = bertcc::read_pretrain_shard(path);
      for (int64_t r = 0; r < s.N && r < 64; ++r) bertcc::make_pretrain_batch(s, r, 1, path).validate(cfg, path);
    }
  });
  return 0;
}
