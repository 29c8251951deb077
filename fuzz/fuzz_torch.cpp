// PyTorch checkpoint reader: zip directory, the restricted unpickler and reading every floating
// tensor (any strides) as fp32.
#include <vector>

#include "bertcc/torch_checkpoint.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bertcc::fuzz::as_file(data, size, ".bin");
  bertcc::fuzz::expect_ok_or_error([&] {
    bertcc::TorchCheckpoint ck(path);
    for (const auto& t : ck.tensors()) {
      if (t.numel() > (int64_t{1} << 22) || t.dtype[0] == 'I' || t.dtype == "U8" || t.dtype == "BOOL") continue;
      std::vector<float> out(static_cast<size_t>(t.numel()));
      ck.read_f32(t, out.data());
    }
  });
  return 0;
}
