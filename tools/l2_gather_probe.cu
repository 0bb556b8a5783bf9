// How much of L2 keeps randomly gathered rows while other data streams past: a probe of the access pattern of the
// double backward's part 1 (md_accel/ops/_codegen.py, dbwd_kernel_*), without its arithmetic. Each warp takes one
// "edge" at a time: it reads the row of a random node (ROW bytes, the default L2 policy: the x and gg_x rows), a
// per-edge stream (STREAM bytes, L2 evict-first, no L1 line: the weights w and ggw) and writes a per-edge result
// (WRITE bytes: grad_w and the grad_x row), under the default policy or evict-first. Under Nsight Compute
// (dram__bytes_read.sum) the DRAM reads beyond the stream's and the row set's own bytes are the rows read again:
// their miss rate m, and the L2 capacity the rows effectively had, about S (1 - m) for S bytes of rows gathered at
// random. Session 83 asked: is that capacity small because of the other streams (then an ordering or a policy could
// win it back) or because of the L2 itself (then only a smaller working set can)?
//
//   nvcc -O3 -arch=sm_90 -o /tmp/l2_gather_probe tools/l2_gather_probe.cu
//   ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum /tmp/l2_gather_probe
//
// Each configuration is one launch of probe_kernel, named on stdout in launch order (with its time by CUDA events).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));         \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ float4 ld_stream(const float4* a, uint64_t policy) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(a), "l"(policy));
  return v;
}

__device__ __forceinline__ void st_stream(float4* a, float4 v, uint64_t policy) {
  asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;"
               ::"l"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "l"(policy) : "memory");
}

// Sizes in float4 (16 bytes) per edge; a warp moves 512 bytes per instruction.
__global__ void probe_kernel(const float4* __restrict__ rows, const int* __restrict__ node,
                             const float4* __restrict__ stream, float4* __restrict__ out, int64_t edges,
                             int row_v, int stream_v, int write_v, int write_evict) {
  const uint64_t policy = evict_first_policy();
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t e = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; e < edges; e += warps) {
    const float4* r = rows + int64_t(__ldg(node + e)) * row_v;
    float acc = 0.f;
    for (int i = lane; i < row_v; i += 32) {
      const float4 v = __ldg(r + i);
      acc += v.x + v.y + v.z + v.w;
    }
    const float4* s = stream + e * stream_v;
    for (int i = lane; i < stream_v; i += 32) {
      const float4 v = ld_stream(s + i, policy);
      acc += v.x + v.y + v.z + v.w;
    }
    float4* o = out + e * write_v;
    const float4 v = make_float4(acc, acc, acc, acc);
    if (write_v == 0 && acc != 0.f) out[e] = v;  // never (the inputs are zeros): keeps the loads where nothing is written
    for (int i = lane; i < write_v; i += 32) {
      if (write_evict)
        st_stream(o + i, v, policy);
      else
        o[i] = v;
    }
  }
}

struct Config {
  const char* name;
  int nodes;
  int stream_bytes, write_bytes, write_evict;
};

int main() {
  const int64_t edges = 312000;        // the copper-sized random graph of kernels.py: 4,000 nodes x 78
  const int row_bytes = 8192;          // mace_mp0_medium float64: x and gg_x rows, 4 KiB each
  const int stream_bytes = 20480;      // w and ggw, 10 KiB each
  const int write_bytes = 14336;       // grad_w 10 KiB and the grad_x row 4 KiB
  const Config configs[] = {
      {"part1_like_4000", 4000, stream_bytes, write_bytes, 0},
      {"writes_evict_first_4000", 4000, stream_bytes, write_bytes, 1},
      {"no_writes_4000", 4000, stream_bytes, 0, 0},
      {"rows_only_4000", 4000, 0, 0, 0},
      {"part1_like_2000", 2000, stream_bytes, write_bytes, 0},
      {"rows_only_2000", 2000, 0, 0, 0},
      {"part1_like_1000", 1000, stream_bytes, write_bytes, 0},
      {"rows_only_1000", 1000, 0, 0, 0},
      {"part1_like_500", 500, stream_bytes, write_bytes, 0},
      {"rows_only_8000", 8000, 0, 0, 0},
  };
  int max_nodes = 0;
  for (const Config& c : configs) max_nodes = c.nodes > max_nodes ? c.nodes : max_nodes;

  float4 *rows, *stream, *out;
  int* node;
  CHECK(cudaMalloc(&rows, size_t(max_nodes) * row_bytes));
  CHECK(cudaMalloc(&stream, size_t(edges) * stream_bytes));
  CHECK(cudaMalloc(&out, size_t(edges) * write_bytes));
  CHECK(cudaMalloc(&node, size_t(edges) * sizeof(int)));
  CHECK(cudaMemset(rows, 0, size_t(max_nodes) * row_bytes));
  CHECK(cudaMemset(stream, 0, size_t(edges) * stream_bytes));
  std::vector<int> host(edges);
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  std::printf("config nodes row_set_MB stream_B write_B write_evict ms floor_read_GB\n");
  for (const Config& c : configs) {
    srand(12345);
    for (int64_t e = 0; e < edges; ++e) host[e] = rand() % c.nodes;  // senders uniform at random, as random_sym
    CHECK(cudaMemcpy(node, host.data(), size_t(edges) * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(out, 0, size_t(edges) * write_bytes));  // (evicts the rows of the previous config from L2)
    CHECK(cudaEventRecord(t0));
    probe_kernel<<<sms * 4, 256>>>(rows, node, stream, out, edges, row_bytes / 16, c.stream_bytes / 16,
                                   c.write_bytes / 16, c.write_evict);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    CHECK(cudaGetLastError());
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    const double floor_gb = (double(c.nodes) * row_bytes + double(edges) * (c.stream_bytes + 4)) / 1e9;
    std::printf("%s %d %.1f %d %d %d %.3f %.3f\n", c.name, c.nodes, c.nodes * double(row_bytes) / 1e6,
                c.stream_bytes, c.write_bytes, c.write_evict, ms, floor_gb);
  }
  return 0;
}
