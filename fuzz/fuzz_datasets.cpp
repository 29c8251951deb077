// Task readers: the first byte picks GLUE (train/dev/test layouts of several tasks), SQuAD JSON
// (training and evaluation) or CoNLL; the rest is the file.
#include "bertcc/glue.h"
#include "bertcc/ner.h"
#include "bertcc/squad.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0] % 8;
  const std::string& path = bertcc::fuzz::as_file(data + 1, size - 1, pick < 5 ? ".tsv" : pick < 7 ? ".json" : ".txt");
  static const char* tasks[] = {"sst-2", "mrpc", "sts-b", "mnli", "qqp"};
  bertcc::fuzz::expect_ok_or_error([&] {
    if (pick < 5) {
      for (auto split : {bertcc::GlueSplit::Labelled, bertcc::GlueSplit::Test})
        bertcc::read_glue(tasks[pick], path, split);
    } else if (pick < 7) {
      bool v2 = false;
      bertcc::read_squad(path, pick == 5, &v2);
    } else {
      bertcc::read_conll(path);
    }
  });
  return 0;
}
