// config.json reader (HF and Google bert_config.json keys) and validation.
#include "bertcc/config.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bertcc::fuzz::as_file(data, size, ".json");
  bertcc::fuzz::expect_ok_or_error([&] { bertcc::load_config(path).validate(path); });
  return 0;
}
