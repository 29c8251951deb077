// Corpus preparation on raw bytes: UTF-8 repair, Wikipedia markup to text, sentence segmentation.
#include "bertcc/corpus.h"
#include "bertcc/wikipedia.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string s(reinterpret_cast<const char*>(data), size);
  bertcc::fuzz::expect_ok_or_error([&] {
    bertcc::sanitize_utf8(s);
    const std::string plain = bertcc::wikitext_to_plain(s);
    bertcc::segment_document(plain);
    bertcc::decode_entities(s);
  });
  return 0;
}
