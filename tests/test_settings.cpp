// RuntimeSettings (core/settings.h): the one parser of the BERTCC_* environment, and what the
// start-up lines say of it.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/settings.h"
#include "test_files.h"

namespace {

using bertcc::parse_settings;
using bertcc::RuntimeSettings;
using bertcc::testing::error_of;

RuntimeSettings parse(const std::map<std::string, std::string>& env) {
  return parse_settings([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Settings, DefaultsWhenUnsetOrEmpty) {
  for (const auto& env : {std::map<std::string, std::string>{},
                          std::map<std::string, std::string>{
                              {"BERTCC_PADDED", ""}, {"BERTCC_ATTENTION", ""}, {"BERTCC_CUDA_VARLEN", ""}}}) {
    const RuntimeSettings s = parse(env);
    EXPECT_FALSE(s.padded);
    EXPECT_FALSE(s.attention_cudnn);
    EXPECT_TRUE(s.cuda_varlen);
    EXPECT_TRUE(s.attention_skip_padding);
    EXPECT_EQ(s.attention_fwd_rows, 0);
    EXPECT_EQ(bertcc::describe_settings(s), "");
  }
}

TEST(Settings, ValuesAndTheirDescription) {
  const RuntimeSettings s = parse({{"BERTCC_PADDED", "1"},
                                   {"BERTCC_ATTENTION", "cudnn"},
                                   {"BERTCC_ATTENTION_FWD_ROWS", "128"},
                                   {"BERTCC_ATTENTION_FWD_MIN_BLOCKS", "4"},
                                   {"BERTCC_ATTENTION_SKIP_PADDING", "0"},
                                   {"BERTCC_CUDA_VARLEN", "0"},
                                   {"BERTCC_CUDA_PROFILE", "1"},
                                   {"BERTCC_PROFILE_GEMM", "1"},
                                   {"BERTCC_GEMM_TUNING", "t.json"},
                                   {"BERTCC_GEMM_TUNE", "1"},
                                   {"BERTCC_CUDNN_LIB", "/x/libcudnn.so.9"},
                                   {"BERTCC_CUDA_MODULE", "/y/libbertcc_cuda.so"}});
  EXPECT_TRUE(s.padded && s.attention_cudnn && s.cuda_profile && s.profile_gemm && s.gemm_tune);
  EXPECT_FALSE(s.attention_skip_padding || s.cuda_varlen);
  EXPECT_EQ(s.attention_fwd_rows, 128);
  EXPECT_EQ(s.attention_fwd_min_blocks, 4);
  EXPECT_EQ(s.gemm_tuning, "t.json");
  EXPECT_EQ(s.cudnn_lib, "/x/libcudnn.so.9");
  EXPECT_EQ(s.cuda_module, "/y/libbertcc_cuda.so");
  EXPECT_EQ(bertcc::describe_settings(s),
            "--padded, BERTCC_PROFILE_GEMM=1, BERTCC_CUDA_PROFILE=1, BERTCC_ATTENTION=cudnn, "
            "BERTCC_CUDA_MODULE=/y/libbertcc_cuda.so, BERTCC_CUDNN_LIB=/x/libcudnn.so.9, BERTCC_GEMM_TUNING=t.json, "
            "BERTCC_GEMM_TUNE=1, "
            "BERTCC_ATTENTION_FWD_ROWS=128, BERTCC_ATTENTION_FWD_MIN_BLOCKS=4, BERTCC_ATTENTION_SKIP_PADDING=0, "
            "BERTCC_CUDA_VARLEN=0");
}

// Every variable with a fixed set of values refuses others, naming itself, the value and the values.
TEST(Settings, BadValuesNameTheVariable) {
  const std::map<std::string, std::string> bad = {{"BERTCC_PADDED", "yes"},
                                                  {"BERTCC_PROFILE_GEMM", "on"},
                                                  {"BERTCC_CUDA_PROFILE", "2"},
                                                  {"BERTCC_ATTENTION", "flash"},
                                                  {"BERTCC_GEMM_TUNE", "true"},
                                                  {"BERTCC_ATTENTION_FWD_ROWS", "32"},
                                                  {"BERTCC_ATTENTION_FWD_MIN_BLOCKS", "2"},
                                                  {"BERTCC_ATTENTION_SKIP_PADDING", "off"},
                                                  {"BERTCC_CUDA_VARLEN", "no"}};
  for (const auto& nv : bad) {
    const std::string name = nv.first, value = nv.second;  // (clang 14: no structured bindings in lambdas)
    const std::string e = error_of([&] { parse({{name, value}}); });
    EXPECT_NE(e.find(name + ": '" + value + "' is not "), std::string::npos) << e;
  }
}

}  // namespace
