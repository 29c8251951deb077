// Backend selection from a --device string. The CUDA backends come from cuda_family()
// (device_family.h): the CUDA module's in builds with it, elsewhere an error that says so.
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/device_family.h"
#include "bertcc/error.h"

namespace bertcc {

Backend& backend_for(const std::string& device) {
  if (device.empty() || device == "cpu" || device == "cpu-staged") {
    BERTCC_CHECK(!settings().cuda_graphs,
                 "--cuda-graphs needs --device cuda (CUDA graphs record GPU work; this is --device ",
                 device.empty() ? "cpu" : device, ")");
    static std::once_flag said;
    if (settings().allow_tf32)
      std::call_once(
          said, [] { std::cerr << "bertcc: --allow-tf32 has no effect on the CPU (its fp32 GEMMs are exact fp32)\n"; });
    return device == "cpu-staged" ? staged_backend() : cpu_backend();
  }
  int index = 0;
  if (device.rfind("cuda", 0) == 0) {
    const std::string rest = device.substr(4);
    if (!rest.empty()) {
      BERTCC_CHECK(rest[0] == ':' && rest.size() > 1 && rest.find_first_not_of("0123456789", 1) == std::string::npos,
                   "--device: '", device, "' is not cpu, cuda, cuda:N or cpu-staged");
      index = std::stoi(rest.substr(1));
    }
  } else {
    fail("--device: '", device, "' is not cpu, cuda, cuda:N or cpu-staged");
  }
  // The family first: in builds with the CUDA module its statics (device memory's books) are
  // then made before `made` and destroyed after the backends in it at exit
  const DeviceFamily& family = cuda_family();
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Backend>> made;
  std::lock_guard<std::mutex> lock(mu);
  auto& b = made[index];
  if (!b) b = family.make(device, index);
  family.set_allow_tf32(settings().allow_tf32);
  return *b;
}

}  // namespace bertcc
