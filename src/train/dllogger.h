// DLLogger JSON-lines log (the format NVIDIA's scripts write), shared by the trainers.
#pragma once
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bertcc/error.h"

namespace bertcc {

// DLLogger JSON-lines backend format: DLLL {"timestamp": ..., "datetime": ..., "type": ..., ...}
class DLLogger {
 public:
  explicit DLLogger(const std::string& path) : out_(path, std::ios::app) {
    BERTCC_CHECK(out_, path, ": cannot open log file: ", std::strerror(errno));
  }
  void log(const nlohmann::ordered_json& step, const nlohmann::ordered_json& data, const char* type = "LOG") {
    const auto now = std::chrono::system_clock::now();
    const double ts = std::chrono::duration<double>(now.time_since_epoch()).count();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    char dt[64];
    std::strftime(dt, sizeof dt, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
    const long us = static_cast<long>((ts - static_cast<double>(t)) * 1e6);
    char full[96];
    std::snprintf(full, sizeof full, "%s.%06ld+00:00", dt, us);
    char tsb[32];
    std::snprintf(tsb, sizeof tsb, "%.6f", ts);
    nlohmann::ordered_json j;
    j["timestamp"] = tsb;
    j["datetime"] = full;
    j["type"] = type;
    j["step"] = step;
    j["data"] = data;
    out_ << "DLLL " << j.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

}  // namespace bertcc
