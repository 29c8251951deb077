// cuda_module() (cuda_module.h) in the bertcc binary: dlopen of libbertcc_cuda.so on first use,
// as cuDNN is opened (src/cuda/attention/cudnn_graphs.cu). The module leaves the engine's symbols
// (settings(), the CPU kernels, the error types) undefined and takes them from the binary, which is
// linked with all of bertcc_lib and exports it (CMakeLists.txt: ENABLE_EXPORTS): one copy of each
// global and of each exception's type, shared by both.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <mutex>
#include <string>

#include "backend/cuda_module.h"
#include "bertcc/error.h"
#include "core/settings.h"

namespace bertcc {
namespace {

// BERTCC_CUDA_MODULE, else libbertcc_cuda.so in the directory of the running binary.
std::string module_path() {
  if (!settings().cuda_module.empty()) return settings().cuda_module;
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe);
  BERTCC_CHECK(n > 0 && n < static_cast<ssize_t>(sizeof exe),
               "--device cuda: cannot read /proc/self/exe to find libbertcc_cuda.so beside the bertcc binary "
               "(BERTCC_CUDA_MODULE names it)");
  const std::string self(exe, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + "libbertcc_cuda.so";
}

const BertccCudaModule* load() {
  const std::string path = module_path();
  // RTLD_NOW: a symbol the binary lacks is an error here, naming it, not a crash later
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    fail("--device cuda: cannot load bertcc's CUDA module ", path, ": ", why ? why : "(no reason given)",
         " (it is built beside the bertcc binary, with cudart, cuBLASLt and NCCL on the library path; "
         "BERTCC_CUDA_MODULE names another file)");
  }
  using Entry = const BertccCudaModule* (*)();
  const auto entry = reinterpret_cast<Entry>(dlsym(lib, "bertcc_cuda_module"));
  if (!entry) {
    const char* why = dlerror();
    fail("--device cuda: ", path, " is not bertcc's CUDA module (no bertcc_cuda_module: ", why ? why : "", ")");
  }
  const BertccCudaModule* m = entry();
  BERTCC_CHECK(m && m->abi == BERTCC_CUDA_MODULE_ABI && m->family, "--device cuda: ", path,
               " is a CUDA module of another bertcc build (interface ", m ? m->abi : 0, ", this bertcc's is ",
               BERTCC_CUDA_MODULE_ABI, "): rebuild it with this bertcc");
  return m;  // never closed: the backends made from it live until exit
}

}  // namespace

const BertccCudaModule& cuda_module() {
  static std::mutex mu;
  static const BertccCudaModule* loaded = nullptr;  // a failed load is retried, and fails again, on the next call
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded) loaded = load();
  return *loaded;
}

}  // namespace bertcc
