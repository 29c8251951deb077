// Attention through cuDNN's graph API (the backend API of cudnn_backend.h), for the shapes where
// its fused flash-attention engine beats bertcc's kernels. libcudnn is opened at run time
// (dlopen), so bertcc runs where it is missing: BERTCC_CUDNN_LIB names the library to open (on the
// GPU machine, PyTorch's nvidia/cudnn/lib/libcudnn.so.9), else "libcudnn.so.9" on the loader's
// path. Failures come back as a reason naming the cuDNN step, status and last error; the caller
// says so and uses bertcc's kernels. Plain C++ (no cuDNN or CUDA types), like cuda_kernels.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/dtype.h"

namespace bertcc::cuda::cudnn {

// The library: opened on first use, once per process. loaded false: why says what failed (the
// path tried and dlerror, or the version).
struct Library {
  bool loaded = false;
  std::string path;    // what was opened ("libcudnn.so.9" or BERTCC_CUDNN_LIB)
  size_t version = 0;  // cudnnGetVersion(): 91900 for 9.19.0
  std::string why;     // when not loaded
};
const Library& library();

// Whether the plans a caller needs for a shape are made (made here on the first call for it, on the
// current device, and kept): training false, the inference forward's; training true, the training
// forward's and the backward's, with or without dropout. False with the first failure's reason (the
// library, the shape, or the graph and plan that failed); a failed shape is not retried, so the
// answer for a shape does not change during a process. Runs nothing.
bool sdpa_ready(int64_t B, int64_t T, int64_t NH, int64_t D, bool training, bool dropout, std::string* why);

// Inference SDPA forward in bf16, Q, K and V read in place from bertcc's qkv16 [B, T, 3C]
// (q | k | v, head h at columns h*D of each), out16 [B, T, C] written. Row t of sequence b attends
// to keys j < kv_len[b] with scale 1/sqrt(D), no dropout; rows t >= q_len[b] are left to cuDNN
// (pass q_len[b] = T for every row as bertcc's kernels compute them). q_len, kv_len: device int32
// [B]. D is 64 or 128, C = NH*D. Queued on this thread's stream. The plan is built on the first
// call for (B, T, NH, D, device) and kept; a shape whose graph or plan failed is not retried.
// False (nothing queued) with the reason in *why when cuDNN cannot run it.
bool sdpa_forward_bf16(bf16_t* out16, const bf16_t* qkv16, const int32_t* q_len, const int32_t* kv_len, int64_t B,
                       int64_t T, int64_t NH, int64_t D, std::string* why);

// For the CPU check (tests/cuda/test_cudnn_attention.cpp): builds and finalizes every tensor and
// operation descriptor of the forward graph for a shape, then the operation graph, without a
// handle or a device. steps receives one line per descriptor ("tensor Q [2,4,128,64] bf16:
// finalized"). With deviceprop_json (device_properties_json's, saved on a GPU machine), also the
// heuristics and an execution plan for that device, still without one (cuDNN 9.8+). False at the
// first failure, with cuDNN's reason in *why.
bool check_forward_graph(int64_t B, int64_t T, int64_t NH, int64_t D, std::vector<std::string>* steps, std::string* why,
                         const std::string* deviceprop_json = nullptr);

// Training SDPA in bf16: the forward with the softmax statistics and dropout, and the backward.
// The graphs are the ones cudnn-frontend's SDPA forward (generate_stats, dropout with a mask) and
// SDPA backward nodes lower to; layouts as sdpa_forward_bf16.
//
// Dropout is a mask that the caller draws (bertcc's Philox decisions, not cuDNN's generator):
// drop_mask is device bf16 [B, NH, T, T], row-major (element (b, h, i, j) at ((b*NH + h)*T + i)*T + j),
// 1.0 where score (i, j) of head h is kept and 0.0 where it is dropped; the kept probabilities are
// multiplied by 1/(1-p), passed by value. p == 0: no dropout in the graph and drop_mask must be null;
// 0 < p < 1: drop_mask must be given (16-byte aligned). The graphs with and without dropout are
// planned separately.
//
// Forward: out16 [B, T, C] as sdpa_forward_bf16, and stats, device float [B, NH, T] (row (b, h, t) at
// (b*NH + h)*T + t): the natural log-sum-exp of row t's scaled, masked scores (max + log sum exp),
// which the backward takes. Rows t >= q_len[b] of out16 and stats are left to cuDNN.
bool sdpa_train_forward_bf16(bf16_t* out16, float* stats, const bf16_t* qkv16, const int32_t* q_len,
                             const int32_t* kv_len, const bf16_t* drop_mask, float p, int64_t B, int64_t T, int64_t NH,
                             int64_t D, std::string* why);

// Backward: dQ, dK and dV written in place into dqkv16 [B, T, 3C] (dq | dk | dv, the layout of
// qkv16; overwritten, not added to), from qkv16, out16 and stats of the training forward, dout16
// [B, T, C] (the gradient of out16), the same lengths, drop_mask and p. Rows t >= q_len[b] of dQ and
// rows j >= kv_len[b] of dK and dV are left to cuDNN. cuDNN's float workspaces (the row dots
// sum(dO*O)*(1-p) and the dQ accumulator, B*NH*T*(D+1) floats) are kept with the plan.
bool sdpa_backward_bf16(bf16_t* dqkv16, const bf16_t* qkv16, const bf16_t* out16, const bf16_t* dout16,
                        const float* stats, const int32_t* q_len, const int32_t* kv_len, const bf16_t* drop_mask,
                        float p, int64_t B, int64_t T, int64_t NH, int64_t D, std::string* why);

// As check_forward_graph, for the training forward and the backward graphs, with or without
// dropout.
bool check_train_forward_graph(int64_t B, int64_t T, int64_t NH, int64_t D, bool dropout,
                               std::vector<std::string>* steps, std::string* why,
                               const std::string* deviceprop_json = nullptr);
bool check_backward_graph(int64_t B, int64_t T, int64_t NH, int64_t D, bool dropout, std::vector<std::string>* steps,
                          std::string* why, const std::string* deviceprop_json = nullptr);

// cuDNN's description of the current device (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION), which
// check_forward_graph takes on a machine without the device. Needs the device.
bool device_properties_json(std::string* json, std::string* why);

// cudnnCreate on the current device: "ok" or cuDNN's status and last error (no device here: what
// cuDNN says then). The handle made is destroyed.
std::string probe_handle();

}  // namespace bertcc::cuda::cudnn
