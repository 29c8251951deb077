// The CUDA family in builds without the CUDA kernels (device_family.h): asking for it is an error
// that says why and what to do.
#include "backend/device_family.h"
#include "bertcc/error.h"

namespace bertcc {

const DeviceFamily& cuda_family() {
  static const DeviceFamily none{
      .make = [](const std::string& device, int) -> std::unique_ptr<Backend> {
        fail("--device ", device,
             ": this bertcc was built without the CUDA kernels (configure found no nvcc; install the CUDA toolkit "
             "at /usr/local/cuda and rebuild, or set BERTCC_CUDA=ON to be told why)");
      },
      .set_allow_tf32 = [](bool) {},
  };
  return none;
}

}  // namespace bertcc
