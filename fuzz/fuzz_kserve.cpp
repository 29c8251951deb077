// The server's KServe v2 / Triton request reader: JSON header, nested or flat data, the binary
// tensor extension. Input: bytes 0-1 (little-endian) give the JSON header's length, as
// Inference-Header-Content-Length would (0xffff or more than the body: the whole body).
#include <string>

#include "fuzz_common.h"
#include "serve/kserve.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t h = static_cast<size_t>(data[0]) | static_cast<size_t>(data[1]) << 8;
  const size_t json_len = h > body.size() ? body.size() : h;
  bertcc::BertConfig c;
  c.vocab_size = 120;
  c.max_position_embeddings = 64;
  try {
    const auto r = bertcc::serve::parse_kserve_request(body, json_len, c, 16);
    // Whatever is accepted is in range.
    for (size_t b = 0; b < r.features.size(); ++b)
      for (size_t t = 0; t < r.features[b].input_ids.size(); ++t)
        if (r.features[b].input_ids[t] < 0 || r.features[b].input_ids[t] >= c.vocab_size ||
            r.features[b].segment_ids[t] < 0 || r.features[b].segment_ids[t] >= c.type_vocab_size)
          __builtin_trap();
  } catch (const bertcc::serve::RequestError&) {
  }
  return 0;
}
