// The GEMM tuning file and its rules (gemm_tuning.h): host code only, no CUDA.
#include "cuda/gemm_tuning.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "bertcc/error.h"
#include "bertcc/fileio.h"

namespace bertcc::cuda::gemm_tuning {
namespace {

using nlohmann::json;
constexpr const char* kFormat = "bertcc gemm tuning";
constexpr int kVersion = 1;

auto key_of(const Shape& s) {
  return std::tie(s.m, s.n, s.k, s.lda, s.ldb, s.ldc, s.batch, s.stride_a, s.stride_b, s.stride_c, s.trans_a, s.trans_b,
                  s.accumulate, s.ab, s.compute, s.out, s.epilogue, s.bias, s.align_a, s.align_b, s.align_c);
}

// Field readers: every error names the file and the field's path.
struct Reader {
  const std::string& file;
  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    fail(file, ": ", where, ": ", what);
  }
  const json& at(const json& o, const std::string& where, const char* key) const {
    const auto it = o.find(key);
    if (it == o.end()) bad(where + key, "missing");
    return *it;
  }
  void only(const json& o, const std::string& where, std::initializer_list<const char*> keys) const {
    if (!o.is_object()) bad(where.empty() ? "the file" : where.substr(0, where.size() - 1), "not an object");
    const std::set<std::string> known(keys.begin(), keys.end());
    for (auto it = o.begin(); it != o.end(); ++it)
      if (!known.count(it.key())) bad(where + it.key(), "not a field of this format (version 1)");
  }
  int64_t integer(const json& o, const std::string& where, const char* key, int64_t lo) const {
    const json& v = at(o, where, key);
    if (!v.is_number_integer()) bad(where + key, "not an integer");
    const int64_t x = v.get<int64_t>();
    if (x < lo) bad(where + key, std::to_string(x) + " is below " + std::to_string(lo));
    return x;
  }
  double number(const json& o, const std::string& where, const char* key) const {
    const json& v = at(o, where, key);
    if (!v.is_number()) bad(where + key, "not a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0) bad(where + key, "not a finite number >= 0");
    return x;
  }
  bool boolean(const json& o, const std::string& where, const char* key) const {
    const json& v = at(o, where, key);
    if (!v.is_boolean()) bad(where + key, "not true or false");
    return v.get<bool>();
  }
  std::string string(const json& o, const std::string& where, const char* key) const {
    const json& v = at(o, where, key);
    if (!v.is_string()) bad(where + key, "not a string");
    return v.get<std::string>();
  }
  std::string one_of(const json& o, const std::string& where, const char* key,
                     std::initializer_list<const char*> allowed) const {
    const std::string v = string(o, where, key);
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return v;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    bad(where + key, "'" + v + "' is not one of " + list);
  }
  uint32_t alignment(const json& o, const std::string& where, const char* key) const {
    const int64_t a = integer(o, where, key, 1);
    if (a > 256 || (a & (a - 1)) != 0) bad(where + key, std::to_string(a) + " is not a power of two up to 256");
    return static_cast<uint32_t>(a);
  }
};

std::string hex(const std::array<uint64_t, 8>& a) {
  std::string s;
  char buf[17];
  for (uint64_t w : a) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(w));
    s += buf;
  }
  return s;
}

bool unhex(const std::string& s, std::array<uint64_t, 8>& a) {
  if (s.size() != 128) return false;
  for (size_t i = 0; i < 8; ++i) {
    uint64_t w = 0;
    for (size_t j = 0; j < 16; ++j) {
      const char c = s[i * 16 + j];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      w = w << 4 | static_cast<uint64_t>(d);
    }
    a[i] = w;
  }
  return true;
}

}  // namespace

bool Device::operator==(const Device& o) const {
  return name == o.name && cc_major == o.cc_major && cc_minor == o.cc_minor && sm_count == o.sm_count &&
         cublaslt_version == o.cublaslt_version && workspace_bytes == o.workspace_bytes;
}

std::string Device::describe() const {
  std::string ws = workspace_bytes % (1 << 20) == 0 ? std::to_string(workspace_bytes >> 20) + " MiB"
                                                    : std::to_string(workspace_bytes) + " bytes";
  return name + " (sm_" + std::to_string(cc_major) + std::to_string(cc_minor) + ", " + std::to_string(sm_count) +
         " SMs), cuBLASLt " + std::to_string(cublaslt_version) + ", workspace " + ws;
}

bool Shape::operator<(const Shape& o) const { return key_of(*this) < key_of(o); }
bool Shape::operator==(const Shape& o) const { return key_of(*this) == key_of(o); }

std::string Shape::describe() const {
  std::string s = ab + " M " + std::to_string(m) + " N " + std::to_string(n) + " K " + std::to_string(k);
  if (batch > 1) s += " batch " + std::to_string(batch);
  if (trans_a) s += ", A transposed";
  if (trans_b) s += ", B transposed";
  if (compute != "32F") s += ", " + compute;
  if (epilogue != "none") s += ", " + epilogue;
  if (accumulate) s += ", accumulating";
  s += ", " + out + " output";
  if (align_a < 256 || align_b < 256 || align_c < 256)
    s += " (alignment A " + std::to_string(align_a) + ", B " + std::to_string(align_b) + ", C " +
         std::to_string(align_c) + ")";
  return s;
}

bool Choice::operator==(const Choice& o) const {
  return algo == o.algo && rank == o.rank && candidates == o.candidates && rejected == o.rejected && ms == o.ms &&
         first_ms == o.first_ms && spread == o.spread && info == o.info;
}

double tolerance(const std::string& out) { return out == "f32" ? 1e-3 : 1.0 / 128; }

std::string Table::to_json() const {
  json gemms = json::array();
  for (const auto& [s, c] : entries) {
    json g = {{"m", s.m},
              {"n", s.n},
              {"k", s.k},
              {"lda", s.lda},
              {"ldb", s.ldb},
              {"ldc", s.ldc},
              {"batch", s.batch},
              {"stride_a", s.stride_a},
              {"stride_b", s.stride_b},
              {"stride_c", s.stride_c},
              {"trans_a", s.trans_a},
              {"trans_b", s.trans_b},
              {"accumulate", s.accumulate},
              {"ab", s.ab},
              {"compute", s.compute},
              {"out", s.out},
              {"epilogue", s.epilogue},
              {"bias", s.bias},
              {"align_a", s.align_a},
              {"align_b", s.align_b},
              {"align_c", s.align_c}};
    gemms.push_back({{"gemm", g},
                     {"algo", hex(c.algo)},
                     {"rank", c.rank},
                     {"candidates", c.candidates},
                     {"rejected", c.rejected},
                     {"ms", c.ms},
                     {"first_ms", c.first_ms},
                     {"spread", c.spread},
                     {"info", c.info}});
  }
  const json j = {{"format", kFormat},
                  {"version", kVersion},
                  {"device",
                   {{"name", device.name},
                    {"cc_major", device.cc_major},
                    {"cc_minor", device.cc_minor},
                    {"sm_count", device.sm_count},
                    {"cublaslt_version", device.cublaslt_version},
                    {"workspace_bytes", device.workspace_bytes}}},
                  {"gemms", gemms}};
  return j.dump(1) + "\n";
}

Table Table::from_json(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(file, ": not a GEMM tuning file (not JSON: ", e.what(), ")");
  }
  const Reader r{file};
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    fail(file, ": not a GEMM tuning file (no \"format\": \"", kFormat, "\")");
  const int64_t version = r.integer(j, "", "version", 0);
  if (version != kVersion)
    fail(file, ": version ", version, " is not one this bertcc reads (", kVersion, "): tune again to write it anew");
  r.only(j, "", {"format", "version", "device", "gemms"});
  Table t;
  const json& d = r.at(j, "", "device");
  r.only(d, "device.", {"name", "cc_major", "cc_minor", "sm_count", "cublaslt_version", "workspace_bytes"});
  t.device.name = r.string(d, "device.", "name");
  t.device.cc_major = static_cast<int>(r.integer(d, "device.", "cc_major", 0));
  t.device.cc_minor = static_cast<int>(r.integer(d, "device.", "cc_minor", 0));
  t.device.sm_count = static_cast<int>(r.integer(d, "device.", "sm_count", 1));
  t.device.cublaslt_version = r.integer(d, "device.", "cublaslt_version", 0);
  t.device.workspace_bytes = r.integer(d, "device.", "workspace_bytes", 0);
  const json& gs = r.at(j, "", "gemms");
  if (!gs.is_array()) r.bad("gemms", "not an array");
  for (size_t i = 0; i < gs.size(); ++i) {
    const std::string at = "gemms[" + std::to_string(i) + "].";
    const json& e = gs[i];
    r.only(e, at, {"gemm", "algo", "rank", "candidates", "rejected", "ms", "first_ms", "spread", "info"});
    const json& g = r.at(e, at, "gemm");
    const std::string gat = at + "gemm.";
    r.only(g, gat, {"m",        "n",        "k",        "lda",     "ldb",     "ldc",        "batch",
                    "stride_a", "stride_b", "stride_c", "trans_a", "trans_b", "accumulate", "ab",
                    "compute",  "out",      "epilogue", "bias",    "align_a", "align_b",    "align_c"});
    Shape s;
    s.m = r.integer(g, gat, "m", 1);
    s.n = r.integer(g, gat, "n", 1);
    s.k = r.integer(g, gat, "k", 1);
    s.lda = r.integer(g, gat, "lda", 1);
    s.ldb = r.integer(g, gat, "ldb", 1);
    s.ldc = r.integer(g, gat, "ldc", 1);
    s.batch = r.integer(g, gat, "batch", 1);
    s.stride_a = r.integer(g, gat, "stride_a", 0);
    s.stride_b = r.integer(g, gat, "stride_b", 0);
    s.stride_c = r.integer(g, gat, "stride_c", 0);
    s.trans_a = r.boolean(g, gat, "trans_a");
    s.trans_b = r.boolean(g, gat, "trans_b");
    s.accumulate = r.boolean(g, gat, "accumulate");
    s.ab = r.one_of(g, gat, "ab", {"f32", "bf16", "f16"});
    s.compute = r.one_of(g, gat, "compute", {"32F", "32F_FAST_TF32"});
    s.out = r.one_of(g, gat, "out", {"f32", "bf16"});
    s.epilogue = r.one_of(g, gat, "epilogue", {"none", "bias"});
    s.bias = r.one_of(g, gat, "bias", {"none", "f32"});
    if ((s.epilogue == "none") != (s.bias == "none"))
      r.bad(gat + "bias", "'" + s.bias + "' with epilogue '" + s.epilogue + "'");
    s.align_a = r.alignment(g, gat, "align_a");
    s.align_b = r.alignment(g, gat, "align_b");
    s.align_c = r.alignment(g, gat, "align_c");
    Choice c;
    if (!unhex(r.string(e, at, "algo"), c.algo))
      r.bad(at + "algo", "not 128 lowercase hex digits (cublasLtMatmulAlgo_t's 64 bytes)");
    c.candidates = static_cast<int>(r.integer(e, at, "candidates", 1));
    c.rank = static_cast<int>(r.integer(e, at, "rank", 0));
    if (c.rank >= c.candidates)
      r.bad(at + "rank", std::to_string(c.rank) + " is not below candidates (" + std::to_string(c.candidates) + ")");
    c.rejected = static_cast<int>(r.integer(e, at, "rejected", 0));
    if (c.rejected >= c.candidates) r.bad(at + "rejected", "every candidate rejected, yet one chosen");
    c.ms = r.number(e, at, "ms");
    c.first_ms = r.number(e, at, "first_ms");
    c.spread = r.number(e, at, "spread");
    c.info = r.string(e, at, "info");
    if (!t.entries.emplace(s, c).second) r.bad(at + "gemm", "the same GEMM as an earlier entry");
  }
  return t;
}

Table Table::load(const std::string& file) { return from_json(read_file(file), file); }

void Table::save(const std::string& file) const { write_file_atomic(file, to_json()); }

Plan plan(const char* file, const char* tune, const Device& here) {
  Plan p;
  const std::string t = tune ? tune : "";
  BERTCC_CHECK(t.empty() || t == "0" || t == "1", "BERTCC_GEMM_TUNE: '", t, "' is not 0 or 1");
  p.tune = t == "1";
  p.file = file ? file : "";
  if (p.file.empty()) {
    BERTCC_CHECK(!p.tune, "BERTCC_GEMM_TUNE=1: no file to write the results to (set BERTCC_GEMM_TUNING=FILE)");
    return p;
  }
  if (!file_exists(p.file)) {
    BERTCC_CHECK(p.tune, "BERTCC_GEMM_TUNING: ", p.file, " does not exist (BERTCC_GEMM_TUNE=1 writes it)");
    p.table.device = here;
    p.use = true;
    p.message = "GEMM tuning: timing cuBLASLt's candidates for each new GEMM on " + here.describe() + ", into " +
                p.file + " (a new file)";
    return p;
  }
  p.table = Table::load(p.file);
  if (p.table.device != here) {
    BERTCC_CHECK(!p.tune, "BERTCC_GEMM_TUNING: ", p.file, " is for ", p.table.device.describe(), "; this is ",
                 here.describe(), ": BERTCC_GEMM_TUNE=1 does not overwrite it (name another file)");
    p.message = "GEMM tuning: " + p.file + " is for " + p.table.device.describe() + "; this is " + here.describe() +
                ": not used (cuBLASLt's heuristic chooses, as without a file)";
    p.table.entries.clear();
    return p;
  }
  p.use = true;
  p.message = "GEMM tuning: " + std::to_string(p.table.entries.size()) + " GEMMs' algorithms from " + p.file + " (" +
              here.describe() + ")" + (p.tune ? "; new GEMMs timed and added" : "");
  return p;
}

}  // namespace bertcc::cuda::gemm_tuning
