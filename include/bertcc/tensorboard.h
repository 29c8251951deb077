// TensorBoard event files (events.out.tfevents.<time>.<host>): TFRecord framing (length, masked
// CRC32C of the length, payload, masked CRC32C of the payload) around Event protobufs with scalar
// summaries; the first record is file_version "brain.Event:2".
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace bertcc {

uint32_t crc32c(const void* data, size_t n);
inline uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);  // creates dir and the event file
  ~TensorBoardWriter();
  void scalar(const std::string& tag, float value, int64_t step);
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& payload);
  std::string path_;
  FILE* f_ = nullptr;
};

}  // namespace bertcc
