// safetensors reader: header parsing and reading every tensor as fp32.
#include <vector>

#include "bertcc/safetensors.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bertcc::fuzz::as_file(data, size, ".safetensors");
  bertcc::fuzz::expect_ok_or_error([&] {
    bertcc::SafetensorsFile f(path);
    for (const char* name : {"a", "b", "bert.embeddings.word_embeddings.weight"})
      if (const bertcc::StTensor* t = f.find(name)) {
        if (t->numel() > (size_t{1} << 24)) continue;  // a valid header may describe big tensors
        std::vector<float> out(t->numel());
        f.read_f32(*t, out.data());
      }
  });
  return 0;
}
