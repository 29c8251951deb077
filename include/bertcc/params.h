// One parameter table: {HF name, shape, offset, weight-decay flag} over one flat buffer.
// Optimizers read the decay flag from here; nobody matches names with regexes.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bertcc {

struct ParamEntry {
  std::string name;            // Hugging Face name, e.g. "bert.encoder.layer.0.attention.self.query.weight"
  std::vector<int64_t> shape;  // HF/PyTorch shape ([out, in] for Linear weights)
  size_t offset = 0;           // in elements, into the flat buffers
  size_t numel = 0;
  bool weight_decay = true;  // false for biases and LayerNorm parameters
  bool trainable = true;     // false for frozen tensors (fine-tuning only the top layers): no update
  float lr_scale = 1.0f;     // multiplies the learning rate (ELECTRA's layer-wise decay)
};

// A tensor of a table by its index: looked up by name once (when a model is built), then used on
// the step path without a string in sight.
struct ParamRef {
  int32_t i = -1;
  explicit operator bool() const { return i >= 0; }
};

class ParamTable {
 public:
  // Appends an entry; returns its offset.
  size_t add(const std::string& name, std::vector<int64_t> shape, bool weight_decay);
  const std::vector<ParamEntry>& entries() const { return entries_; }
  size_t total() const { return total_; }
  const ParamEntry* find(const std::string& name) const;
  const ParamEntry& at(const std::string& name) const;  // throws naming the tensor
  ParamRef ref(const std::string& name) const;          // throws naming the tensor
  ParamRef find_ref(const std::string& name) const;     // an empty ref when absent
  const ParamEntry& operator[](ParamRef r) const { return entries_[static_cast<size_t>(r.i)]; }
  void set_trainable(const std::string& name, bool trainable);
  void set_lr_scale(const std::string& name, float scale);

 private:
  std::vector<ParamEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  size_t total_ = 0;
};

// An allocator's construction that leaves an element made without a value as the memory holds it
// (default-initialised) and makes the others as usual: what lets a vector grow (resize) without
// writing, so that new pages stay untouched, not resident, until written.
struct DefaultInitConstruct {
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Memory for a model's weights: zeros straight from the kernel (an anonymous mapping, its whole
// 2 MB pages asked for as huge pages), resident only once written. A vector of it sized with
// resize() holds zeros without writing them, so a model costs memory only for the tensors written
// so far: a load for inference alone (load_model_dir_for_inference) gives each linear layer's
// pages back as soon as it is quantized or packed, and never holds the whole fp32 model. Elements
// it constructs without a value are left as the memory holds them (zeros, in new memory; a vector
// shrunk and grown again keeps what its old elements held).
template <typename T>
struct ZeroPagesAllocator : DefaultInitConstruct {
  using value_type = T;
  ZeroPagesAllocator() = default;
  template <typename U>
  ZeroPagesAllocator(const ZeroPagesAllocator<U>&) noexcept {}

  static constexpr size_t kHuge = size_t{2} << 20;
  static size_t mapped_bytes(size_t n) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE)), bytes = n ? n * sizeof(T) : 1;
    return (bytes + page - 1) / page * page;
  }
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / 2 / sizeof(T)) throw std::bad_array_new_length();
    const size_t len = mapped_bytes(n), slack = len >= kHuge ? kHuge : 0;  // room to start on a huge page
    void* m = ::mmap(nullptr, len + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    auto b = reinterpret_cast<uintptr_t>(m);
    if (slack) {  // the mapping trimmed to [a, a + len), a on a 2 MB boundary
      const uintptr_t a = (b + kHuge - 1) / kHuge * kHuge;
      if (a > b) ::munmap(m, a - b);
      if (b + slack > a) ::munmap(reinterpret_cast<void*>(a + len), b + slack - a);
      b = a;
      const uintptr_t e = (b + len) / kHuge * kHuge;
      if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
    }
    return reinterpret_cast<T*>(b);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (p) ::munmap(p, mapped_bytes(n));
  }
  friend bool operator==(const ZeroPagesAllocator&, const ZeroPagesAllocator&) { return true; }
};

// A model's weights (Bert::params()): one flat buffer the table's offsets index.
using ParamVector = std::vector<float, ZeroPagesAllocator<float>>;

}  // namespace bertcc
