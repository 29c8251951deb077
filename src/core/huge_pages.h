// Large buffers (a model's weights, gradients and their bf16 copy) asked for in transparent huge
// pages before they are first touched: faulting 440 MB in 4 KB pages is 110,000 page faults, which
// cost more than the bytes themselves (most of a bert-base load on a virtual machine). A hint
// (MADV_HUGEPAGE): where the kernel offers no huge pages the memory is ordinary pages, as before.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bertcc {

// v = n copies of `value`, in new memory whose whole 2 MB pages were asked for as huge pages.
template <typename T>
void assign_in_huge_pages(std::vector<T>& v, size_t n, const T& value) {
  std::vector<T>().swap(v);
  v.reserve(n);
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(v.data()), end = begin + n * sizeof(T);
  const uintptr_t b = (begin + kHuge - 1) / kHuge * kHuge, e = end / kHuge * kHuge;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
  v.assign(n, value);
}

}  // namespace bertcc
