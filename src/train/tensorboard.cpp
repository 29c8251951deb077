#include "bertcc/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "bertcc/error.h"

namespace bertcc {
namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli, reflected
    t[i] = c;
  }
  return t;
}

void varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}
void bytes_field(std::string& s, int field, const std::string& b) {
  varint(s, static_cast<uint64_t>(field) << 3 | 2);
  varint(s, b.size());
  s += b;
}
template <class T>
void fixed(std::string& s, int field, int wire, T v) {
  varint(s, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire));
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." + host;
  f_ = std::fopen(path_.c_str(), "ab");
  BERTCC_CHECK(f_, path_, ": cannot create TensorBoard event file: ", std::strerror(errno));
  std::string ev;
  fixed(ev, 1, 1, now_seconds());
  bytes_field(ev, 3, "brain.Event:2");
  record(ev);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::scalar(const std::string& tag, float value, int64_t step) {
  std::string v, summary, ev;
  bytes_field(v, 1, tag);
  fixed(v, 2, 5, value);  // simple_value: float, wire type 5
  bytes_field(summary, 1, v);
  fixed(ev, 1, 1, now_seconds());
  varint(ev, 2 << 3 | 0);
  varint(ev, static_cast<uint64_t>(step));
  bytes_field(ev, 5, summary);
  record(ev);
}

void TensorBoardWriter::record(const std::string& payload) {
  const uint64_t len = payload.size();
  char head[12];
  std::memcpy(head, &len, 8);
  const uint32_t lc = masked_crc32c(head, 8);
  std::memcpy(head + 8, &lc, 4);
  const uint32_t pc = masked_crc32c(payload.data(), payload.size());
  const bool ok = std::fwrite(head, 1, 12, f_) == 12 &&
                  std::fwrite(payload.data(), 1, payload.size(), f_) == payload.size() &&
                  std::fwrite(&pc, 1, 4, f_) == 4 && std::fflush(f_) == 0;
  BERTCC_CHECK(ok, path_, ": write failed");
}

}  // namespace bertcc
