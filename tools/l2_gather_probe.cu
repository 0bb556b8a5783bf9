// How much of L2 keeps randomly gathered rows while other data streams past: a probe of the access pattern of the
// double backward's part 1 (md_accel/ops/_codegen.py, dbwd_kernel_*), without its arithmetic. Each warp takes one
// "edge" at a time: it reads the row of a random node (ROW bytes: the x and gg_x rows, default L2 policy, or
// evict-last with a persisting set-aside), a per-edge stream (STREAM bytes, L2 evict-first, no L1 line: the weights
// w and ggw) and writes a per-edge result (WRITE bytes: grad_w and the grad_x row) by plain, evict-first or
// streaming stores or by bulk copies from shared memory. Under Nsight Compute (dram__bytes_read.sum) the DRAM reads
// beyond the stream's and the row set's own bytes are the rows read again: their miss rate m, and the L2 capacity
// the rows effectively had, about S (1 - m) for S bytes of rows gathered at random.
// Session 84 (H100): the rows alone kept ~29 MB of L2, beside the evict-first stream ~25 MB, with the plain writes
// as well ~10 MB (evict-first writes ~14 MB): the writes, not the L2's size, push the rows out.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/l2_gather_probe tools/l2_gather_probe.cu
//   ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum /tmp/l2_gather_probe
//
// Each configuration is one launch of probe_kernel, named on stdout in launch order (with its time by CUDA events).
#include <cuda_runtime.h>

#include <algorithm>
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

__device__ __forceinline__ uint64_t make_policy(bool last) {
  uint64_t p;
  if (last)
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ float4 ld_hint(const float4* a, uint64_t policy) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(a), "l"(policy));
  return v;
}

__device__ __forceinline__ void st_hint(float4* a, float4 v, uint64_t policy) {
  asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;"
               ::"l"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "l"(policy) : "memory");
}

// How a probe writes its per-edge result.
enum WriteMode { kPlain = 0, kEvictFirst = 1, kStreaming = 2, kBulkEvictFirst = 3, kBulkPlain = 4 };
constexpr int kWarps = 8, kChunk = 128;  // bulk writes: each warp stages 128 float4 (2 KiB) at a time, two buffers

// A bulk (TMA) store of one staged chunk by lane 0, optionally under an L2 cache policy (sm_90).
__device__ __forceinline__ void bulk_store(float4* dst, const float4* src_smem, int bytes, bool hint, uint64_t policy) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(src_smem));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  if (hint)
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
                 ::"l"(dst), "r"(s), "r"(bytes), "l"(policy) : "memory");
  else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(s), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Sizes in float4 (16 bytes) per edge; a warp moves 512 bytes per instruction. row_last: the rows read under an
// L2 evict-last policy (which keeps lines longer only inside a persisting set-aside, cudaLimitPersistingL2CacheSize).
__global__ void __launch_bounds__(kWarps * 32) probe_kernel(const float4* __restrict__ rows,
    const int* __restrict__ node, const float4* __restrict__ stream, float4* __restrict__ out, int64_t edges,
    int row_v, int stream_v, int write_v, int write_mode, int row_last) {
  __shared__ __align__(128) float4 stage[kWarps][2][kChunk];
  const uint64_t first = make_policy(false), last = make_policy(true);
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const bool bulk = write_mode == kBulkEvictFirst || write_mode == kBulkPlain;
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  int buf = 0;
  for (int64_t e = int64_t(blockIdx.x) * kWarps + warp; e < edges; e += warps) {
    const float4* r = rows + int64_t(__ldg(node + e)) * row_v;
    float acc = 0.f;
    for (int i = lane; i < row_v; i += 32) {
      const float4 v = row_last ? ld_hint(r + i, last) : __ldg(r + i);
      acc += v.x + v.y + v.z + v.w;
    }
    const float4* s = stream + e * stream_v;
    for (int i = lane; i < stream_v; i += 32) {
      const float4 v = ld_hint(s + i, first);
      acc += v.x + v.y + v.z + v.w;
    }
    float4* o = out + e * write_v;
    const float4 v = make_float4(acc, acc, acc, acc);
    if (write_v == 0 && acc != 0.f) out[e] = v;  // never (the inputs are zeros): keeps the loads where nothing is written
    for (int c = 0; c < write_v; c += kChunk) {
      const int n = min(kChunk, write_v - c);
      if (bulk) {
        if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");  // this buffer's last store read
        __syncwarp();
        for (int i = lane; i < n; i += 32) stage[warp][buf][i] = v;
        __syncwarp();
        if (lane == 0) bulk_store(o + c, stage[warp][buf], n * 16, write_mode == kBulkEvictFirst, first);
        buf ^= 1;
      } else {
        for (int i = lane; i < n; i += 32) {
          if (write_mode == kEvictFirst)
            st_hint(o + c + i, v, first);
          else if (write_mode == kStreaming)
            __stcs(o + c + i, v);
          else
            o[c + i] = v;
        }
      }
    }
  }
  if (bulk && lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // before the block's smem goes
}

struct Config {
  const char* name;
  int nodes;
  int stream_bytes, write_bytes, write_mode;
  int row_last, persist_mb;  // rows evict-last; the persisting L2 set-aside during the launch (MB)
};

int main() {
  const int64_t edges = 312000;        // the copper-sized random graph of kernels.py: 4,000 nodes x 78
  const int row_bytes = 8192;          // mace_mp0_medium float64: x and gg_x rows, 4 KiB each
  const int stream_bytes = 20480;      // w and ggw, 10 KiB each
  const int write_bytes = 14336;       // grad_w 10 KiB and the grad_x row 4 KiB
  // Session 83's set (every write mode plain or evict-first) ran in session 84: part1_like_4000 reads 1.78 GB
  // beyond its floor, no_writes_4000 0.56, rows_only_4000 0.27; these take the write modes and the rows' policy on.
  const Config configs[] = {
      {"part1_like_4000", 4000, stream_bytes, write_bytes, kPlain, 0, 0},
      {"writes_evict_first_4000", 4000, stream_bytes, write_bytes, kEvictFirst, 0, 0},
      {"writes_streaming_4000", 4000, stream_bytes, write_bytes, kStreaming, 0, 0},
      {"writes_bulk_4000", 4000, stream_bytes, write_bytes, kBulkPlain, 0, 0},
      {"writes_bulk_evict_first_4000", 4000, stream_bytes, write_bytes, kBulkEvictFirst, 0, 0},
      {"no_writes_4000", 4000, stream_bytes, 0, kPlain, 0, 0},
      {"rows_last_4000", 4000, stream_bytes, write_bytes, kPlain, 1, 0},
      {"rows_last_persist16_4000", 4000, stream_bytes, write_bytes, kPlain, 1, 16},
      {"rows_last_persist32_4000", 4000, stream_bytes, write_bytes, kPlain, 1, 32},
      {"rows_last_persist32_wef_4000", 4000, stream_bytes, write_bytes, kEvictFirst, 1, 32},
      {"rows_last_persist32_bulk_ef_4000", 4000, stream_bytes, write_bytes, kBulkEvictFirst, 1, 32},
      {"part1_like_4000_again", 4000, stream_bytes, write_bytes, kPlain, 0, 0},
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
  int sms = 0, max_persist = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&max_persist, cudaDevAttrMaxPersistingL2CacheSize, 0));
  std::printf("max persisting L2 set-aside: %.1f MB\n", max_persist / 1e6);
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  std::printf("config nodes row_set_MB stream_B write_B write_mode row_last persist_MB ms floor_read_GB\n");
  for (const Config& c : configs) {
    srand(12345);
    for (int64_t e = 0; e < edges; ++e) host[e] = rand() % c.nodes;  // senders uniform at random, as random_sym
    CHECK(cudaMemcpy(node, host.data(), size_t(edges) * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(out, 0, size_t(edges) * write_bytes));  // (evicts the rows of the previous config from L2)
    const size_t persist = std::min(size_t(c.persist_mb) * 1000000, size_t(max_persist));
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, persist));
    CHECK(cudaEventRecord(t0));
    probe_kernel<<<sms * 4, kWarps * 32>>>(rows, node, stream, out, edges, row_bytes / 16, c.stream_bytes / 16,
                                          c.write_bytes / 16, c.write_mode, c.row_last);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    CHECK(cudaGetLastError());
    CHECK(cudaCtxResetPersistingL2Cache());  // (the rows' evict-last lines back to normal for the next config)
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    const double floor_gb = (double(c.nodes) * row_bytes + double(edges) * (c.stream_bytes + 4)) / 1e9;
    std::printf("%s %d %.1f %d %d %d %d %.1f %.3f %.3f\n", c.name, c.nodes, c.nodes * double(row_bytes) / 1e6,
                c.stream_bytes, c.write_bytes, c.write_mode, c.row_last, persist / 1e6, ms, floor_gb);
  }
  return 0;
}
