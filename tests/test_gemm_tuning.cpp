// The GEMM tuning file (src/cuda/gemm_tuning.*), host code only: round trip, key matching, the
// environment's rules, another device's file, atomic writes and bad files. No GPU needed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "cuda/gemm_tuning.h"
#include "test_files.h"

using namespace bertcc;
using namespace bertcc::cuda::gemm_tuning;
namespace fs = std::filesystem;

namespace {

using bertcc::testing::error_of;
using bertcc::testing::TmpDir;

Device h200() {
  Device d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.cublaslt_version = 130100;
  d.workspace_bytes = 32 << 20;
  return d;
}

// The layer's QKV forward at 8192 tokens as gemm.cu describes it.
Shape qkv() {
  Shape s;
  s.m = 8192, s.n = 3072, s.k = 1024, s.lda = 1024, s.ldb = 1024, s.ldc = 3072, s.trans_b = true;
  s.out = "bf16", s.epilogue = "bias", s.bias = "f32", s.align_b = 16;
  return s;
}

Table table() {
  Table t;
  t.device = h200();
  Choice c;
  for (int i = 0; i < 8; ++i) c.algo[static_cast<size_t>(i)] = 0x0123456789abcdefull * static_cast<uint64_t>(i + 1);
  c.rank = 3, c.candidates = 16, c.rejected = 1, c.ms = 0.2125, c.first_ms = 0.2375, c.spread = 0.004;
  c.info = "algo 66, tile 20, split-K 1";
  t.entries.emplace(qkv(), c);
  Shape dw = qkv();
  dw.m = 3072, dw.n = 1024, dw.k = 8192, dw.trans_a = true, dw.trans_b = false, dw.accumulate = true;
  dw.out = "f32", dw.epilogue = "none", dw.bias = "none", dw.align_b = 256;
  c.rank = 0, c.ms = 0.1 / 3, c.first_ms = c.ms, c.algo[7] = ~0ull;
  t.entries.emplace(dw, c);
  return t;
}

}  // namespace

TEST(GemmTuning, FileRoundTrip) {
  TmpDir d;
  const Table t = table();
  t.save(d / "t.json");
  const Table u = Table::load(d / "t.json");
  EXPECT_TRUE(u.device == t.device);
  ASSERT_EQ(u.entries.size(), 2u);
  EXPECT_TRUE(u.entries == t.entries);  // doubles too: the JSON keeps every bit
  EXPECT_EQ(u.to_json(), t.to_json());
  // nothing left beside it by the atomic write
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d.path)) ++files;
  EXPECT_EQ(files, 1);
}

TEST(GemmTuning, KeyMatchesEveryField) {
  const Table t = table();
  EXPECT_EQ(t.entries.count(qkv()), 1u);
  // each field the algorithm depends on makes another GEMM
  std::vector<Shape> others(12, qkv());
  others[0].m = 8193;
  others[1].ldc = 3080;
  others[2].trans_a = true;
  others[3].accumulate = true;
  others[4].ab = "f16";
  others[5].compute = "32F_FAST_TF32";
  others[6].out = "f32";
  others[7].epilogue = "none", others[7].bias = "none";
  others[8].align_a = 128;
  others[9].align_b = 256;
  others[10].align_c = 8;
  others[11].batch = 2, others[11].stride_c = 8192 * 3072;
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_EQ(t.entries.count(others[i]), 0u) << i;
    EXPECT_FALSE(others[i] == qkv()) << i;
  }
  EXPECT_EQ(qkv().describe(),
            "bf16 M 8192 N 3072 K 1024, B transposed, bias, bf16 output (alignment A 256, B 16, C 256)");
}

TEST(GemmTuning, Plan) {
  TmpDir d;
  const Device here = h200();
  // neither variable: today's behaviour, nothing said
  Plan p = plan(nullptr, nullptr, here);
  EXPECT_FALSE(p.use);
  EXPECT_FALSE(p.tune);
  EXPECT_TRUE(p.message.empty());
  p = plan("", "0", here);
  EXPECT_FALSE(p.use || p.tune);
  EXPECT_NE(error_of([&] { plan(nullptr, "1", here); }).find("BERTCC_GEMM_TUNE=1: no file"), std::string::npos);
  EXPECT_NE(error_of([&] { plan(nullptr, "yes", here); }).find("BERTCC_GEMM_TUNE: 'yes' is not 0 or 1"),
            std::string::npos);
  const std::string f = d / "t.json";
  EXPECT_NE(error_of([&] { plan(f.c_str(), nullptr, here); }).find(f + " does not exist"), std::string::npos);
  // tuning into a new file
  p = plan(f.c_str(), "1", here);
  EXPECT_TRUE(p.use && p.tune);
  EXPECT_TRUE(p.table.entries.empty());
  EXPECT_TRUE(p.table.device == here);
  EXPECT_NE(p.message.find("(a new file)"), std::string::npos);
  // a file for this device: used, tuned further on request
  table().save(f);
  p = plan(f.c_str(), nullptr, here);
  EXPECT_TRUE(p.use);
  EXPECT_FALSE(p.tune);
  EXPECT_EQ(p.table.entries.size(), 2u);
  EXPECT_EQ(p.message, "GEMM tuning: 2 GEMMs' algorithms from " + f +
                           " (NVIDIA H200 (sm_90, 132 SMs), cuBLASLt 130100, workspace 32 MiB)");
  p = plan(f.c_str(), "1", here);
  EXPECT_TRUE(p.use && p.tune);
  EXPECT_NE(p.message.find("new GEMMs timed and added"), std::string::npos);
}

TEST(GemmTuning, AnotherDevicesFileIsSaidAndNotUsed) {
  TmpDir d;
  const std::string f = d / "t.json";
  table().save(f);
  Device h100 = h200();
  h100.name = "NVIDIA H100 80GB HBM3";
  Device newer = h200();
  newer.cublaslt_version = 130200;
  Device small_ws = h200();
  small_ws.workspace_bytes = 4 << 20;
  Device fewer = h200();
  fewer.sm_count = 114;
  for (const Device& here : {h100, newer, small_ws, fewer}) {
    const Plan p = plan(f.c_str(), nullptr, here);
    EXPECT_FALSE(p.use);
    EXPECT_TRUE(p.table.entries.empty());
    EXPECT_EQ(p.message, "GEMM tuning: " + f +
                             " is for NVIDIA H200 (sm_90, 132 SMs), cuBLASLt 130100, workspace 32 MiB; this is " +
                             here.describe() + ": not used (cuBLASLt's heuristic chooses, as without a file)");
    // tuning would overwrite another device's results: refused
    EXPECT_NE(error_of([&] { plan(f.c_str(), "1", here); }).find("does not overwrite it"), std::string::npos);
  }
  EXPECT_EQ(small_ws.describe(), "NVIDIA H200 (sm_90, 132 SMs), cuBLASLt 130100, workspace 4 MiB");
}

TEST(GemmTuning, BadFilesNameTheFileAndField) {
  TmpDir d;
  const std::string f = d / "t.json";
  const nlohmann::json good = nlohmann::json::parse(table().to_json());
  auto write = [&](const std::string& text) { std::ofstream(f, std::ios::binary) << text; };
  auto err = [&](const nlohmann::json& j) {
    write(j.dump());
    return error_of([&] { Table::load(f); });
  };
  write("{\"format\": ");
  EXPECT_NE(error_of([&] { Table::load(f); }).find(f + ": not a GEMM tuning file (not JSON"), std::string::npos);
  EXPECT_NE(err(nlohmann::json{{"a", 1}}).find(f + ": not a GEMM tuning file (no \"format\""), std::string::npos);
  struct Case {
    std::function<void(nlohmann::json&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& j) { j["version"] = 2; }, ": version 2 is not one this bertcc reads (1)"},
      {[](auto& j) { j.erase("device"); }, ": device: missing"},
      {[](auto& j) { j["device"]["sm_count"] = "132"; }, ": device.sm_count: not an integer"},
      {[](auto& j) { j["device"]["colour"] = 1; }, ": device.colour: not a field of this format"},
      {[](auto& j) { j["gemms"] = 3; }, ": gemms: not an array"},
      {[](auto& j) { j["gemms"][1]["gemm"].erase("ldc"); }, ": gemms[1].gemm.ldc: missing"},
      {[](auto& j) { j["gemms"][0]["gemm"]["m"] = 0; }, ": gemms[0].gemm.m: 0 is below 1"},
      {[](auto& j) { j["gemms"][0]["gemm"]["ab"] = "fp8"; }, ": gemms[0].gemm.ab: 'fp8' is not one of f32, bf16, f16"},
      {[](auto& j) { j["gemms"][0]["gemm"]["epilogue"] = "gelu_bias"; },
       ": gemms[0].gemm.epilogue: 'gelu_bias' is not one of none, bias"},
      {[](auto& j) { j["gemms"][0]["gemm"]["bias"] = "f32"; }, ": gemms[0].gemm.bias: 'f32' with epilogue 'none'"},
      {[](auto& j) { j["gemms"][0]["gemm"]["align_c"] = 24; },
       ": gemms[0].gemm.align_c: 24 is not a power of two up to 256"},
      {[](auto& j) { j["gemms"][0]["gemm"]["trans_a"] = 1; }, ": gemms[0].gemm.trans_a: not true or false"},
      {[](auto& j) { j["gemms"][0]["algo"] = "00ff"; }, ": gemms[0].algo: not 128 lowercase hex digits"},
      {[](auto& j) { j["gemms"][1]["rank"] = 16; }, ": gemms[1].rank: 16 is not below candidates (16)"},
      {[](auto& j) { j["gemms"][1]["ms"] = -1.0; }, ": gemms[1].ms: not a finite number >= 0"},
      {[](auto& j) { j["gemms"][1] = j["gemms"][0]; }, ": gemms[1].gemm: the same GEMM as an earlier entry"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.change(j);
    const std::string e = err(j);
    EXPECT_NE(e.find(f + c.message), std::string::npos) << c.message << " / " << e;
  }
  // a folder, a missing file
  EXPECT_NE(error_of([&] { Table::load(d.path.string()); }), "");
  EXPECT_NE(error_of([&] { Table::load(d / "none.json"); }).find("none.json"), std::string::npos);
}

TEST(GemmTuning, Tolerances) {
  EXPECT_EQ(tolerance("f32"), 1e-3);
  EXPECT_EQ(tolerance("bf16"), 1.0 / 128);  // two bf16 ulps of the largest output
}
