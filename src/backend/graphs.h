// Graph capture (--cuda-graphs), one of the interfaces a Backend is made of (backend.h). A backend
// that can (graphs(): CUDA) records the device work queued between graph_begin and graph_end
// instead of running it; graph_launch runs the record again, on the same buffers and with the same
// arguments, in order with the work queued around it. Inside a recording, copies to or from the
// host, allocations and frees are errors (the record holds device work only); graph_abort ends a
// recording that an error interrupted. memory_epoch changes whenever one of the backend's buffers
// is freed: a record made at another epoch may name a buffer that is gone.
#pragma once
#include <cstdint>

#include "bertcc/error.h"

namespace bertcc {

class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  virtual bool graphs() const { return false; }
  virtual void graph_begin() { fail("this device records no graphs (--cuda-graphs needs --device cuda)"); }
  virtual void* graph_end() { fail("this device records no graphs"); }
  virtual void graph_abort() {}
  virtual void graph_launch(void*) { fail("this device records no graphs"); }
  virtual void graph_destroy(void*) {}
  virtual uint64_t memory_epoch() const { return 0; }
};

}  // namespace bertcc
