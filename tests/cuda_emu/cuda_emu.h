// Host emulation of the CUDA subset md_accel's generated kernels use (tests/cuda_emu/emulate.py):
// one std::thread per CUDA thread, std::barrier for __syncthreads, named barriers and warp
// shuffles, host atomics for atomicAdd; blocks run one after the other, on the same threads. Shared
// memory (dynamic, and static arrays through emu::block_static) starts as NaN bytes in every block,
// so reads of unwritten shared memory show. EMU_SMS / EMU_PER_SM (< 8 each) set what the occupancy
// queries return (grid sizes), EMU_SMEM_KIB the shared memory per block (default 227, an H100's).
// Lockstep-free: code that relies on implicit warp synchrony fails here, as it should.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>
using std::fma;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __constant__ static
#define __shared__ static  // blocks run one after another (launch below), so one copy serves them all
#define __align__(n) alignas(n)

#define MD_ACCEL_MMA_HOST_EMU 1  // csrc/mma.cuh takes its host versions from mma_emu.h

struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
struct alignas(16) double2 { double x, y; };
typedef int cudaError_t;
typedef void* cudaStream_t;
constexpr int cudaSuccess = 0;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                      cudaDevAttrComputeCapabilityMajor };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated error"; }
template <typename K> cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }
inline int emu_env(const char* n, int dflt) { const char* v = std::getenv(n); return v ? std::atoi(v) : dflt; }
// each (EMU_SMS, EMU_PER_SM) setting is its own "device", so per-device caches see the change
inline cudaError_t cudaGetDevice(int* d) { *d = (8 * emu_env("EMU_SMS", 2) + emu_env("EMU_PER_SM", 1)) % 64; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? emu_env("EMU_SMEM_KIB", 227) * 1024  // H100 by default
       : a == cudaDevAttrComputeCapabilityMajor    ? 9
                                                   : emu_env("EMU_SMS", 2);
  return cudaSuccess;
}
template <typename K> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, K, int, size_t) {
  *n = emu_env("EMU_PER_SM", 1); return cudaSuccess; }

namespace emu {
struct Warp { std::barrier<> bar{32}; alignas(8) unsigned char slot[32][8]; };
struct Block {
  int nthreads;
  std::barrier<> bar;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<unsigned char> smem;
  std::mutex mu;
  std::map<std::pair<int, int>, std::unique_ptr<std::barrier<>>> named;
  std::map<const void*, std::unique_ptr<unsigned char[]>> statics;  // static __shared__ arrays
  Block(int n, size_t smem_bytes) : nthreads(n), bar(n), smem(smem_bytes + 16) {
    for (int w = 0; w < n / 32; ++w) warps.emplace_back(new Warp());
    // poison shared memory: reads of unwritten shared memory show up as NaN
    std::memset(smem.data(), 0xff, smem.size());
  }
};
inline thread_local dim3 t_tid, t_bid;
inline dim3 g_bdim, g_gdim;
inline Block* g_block = nullptr;
inline unsigned char* smem() {
  auto p = reinterpret_cast<uintptr_t>(g_block->smem.data());
  return reinterpret_cast<unsigned char*>((p + 15) & ~uintptr_t(15));
}
inline void named_sync(int id, int n) {
  std::barrier<>* b;
  {
    std::lock_guard<std::mutex> l(g_block->mu);
    auto& p = g_block->named[{id, n}];
    if (!p) p.reset(new std::barrier<>(n));
    b = p.get();
  }
  b->arrive_and_wait();
}
// A static __shared__ array A of the running block (emulate.py rewrites the declarations), the same
// for all its threads, NaN bytes until written, 16-byte aligned.
template <typename A>
A& block_static(const void* key) {
  std::lock_guard<std::mutex> l(g_block->mu);
  auto& p = g_block->statics[key];
  if (!p) {
    p.reset(new unsigned char[sizeof(A) + 16]);
    std::memset(p.get(), 0xff, sizeof(A) + 16);
  }
  return *reinterpret_cast<A*>((reinterpret_cast<uintptr_t>(p.get()) + 15) & ~uintptr_t(15));
}
inline Warp& warp() { return *g_block->warps[t_tid.x / 32]; }
// The blocks of a launch run one after another on one team of `block` threads (made once per launch, not per block:
// thread creation was most of the emulated tests' time): each thread runs its part of block b, then waits at `next`
// for the others, whose completion step (one thread, all arrived) gives the next block fresh state (shared memory
// poisoned again, new named barriers and static arrays).
template <typename F>
void launch(unsigned grid, unsigned block, size_t smem_bytes, F&& body) {
  g_gdim.x = grid;
  g_bdim.x = block;
  if (grid == 0 || block == 0) return;
  std::unique_ptr<Block> blk(new Block(int(block), smem_bytes));
  g_block = blk.get();
  auto fresh = [&]() noexcept {
    blk.reset(new Block(int(block), smem_bytes));
    g_block = blk.get();
  };
  std::barrier<decltype(fresh)> next(block, fresh);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < block; ++t)
    ts.emplace_back([&, t] {
      t_tid.x = t;
      for (unsigned b = 0; b < grid; ++b) {
        t_bid.x = b;
        body();
        next.arrive_and_wait();
      }
    });
  for (auto& th : ts) th.join();
  g_block = nullptr;
}
}  // namespace emu

#define threadIdx emu::t_tid
#define blockIdx emu::t_bid
#define blockDim emu::g_bdim
#define gridDim emu::g_gdim
inline void __syncthreads() { emu::g_block->bar.arrive_and_wait(); }
// __syncwarp(mask) of a partial warp: a barrier of the mask's lanes (named by the warp, so warps do not mix)
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask == 0xffffffffu) return emu::warp().bar.arrive_and_wait();
  emu::named_sync(1 << 20 | int(threadIdx.x / 32), __builtin_popcount(mask));
}
template <typename T> T __ldg(const T* p) { return *p; }
// CUDA's integer min of device code (csrc/tp_conv_kernels.cu)
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
// the block's threads run concurrently (host threads): device atomics as host atomics
template <typename T> T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
namespace emu {
// A full warp's exchange: every lane posts v, then reads the value lane `from(lane)` posted
template <typename T, typename F> T warp_exchange(T v, F from) {
  static_assert(sizeof(T) <= 8);
  auto& w = warp();
  const int lane = threadIdx.x & 31;
  std::memcpy(w.slot[lane], &v, sizeof(T));
  w.bar.arrive_and_wait();
  T r;
  std::memcpy(&r, w.slot[from(lane) & 31], sizeof(T));
  w.bar.arrive_and_wait();
  return r;
}
}  // namespace emu
// __shfl_sync (lane src modulo 32, as the hardware's width 32) and __shfl_xor_sync of a full warp
template <typename T> T __shfl_sync(unsigned, T v, int src) { return emu::warp_exchange(v, [src](int) { return src; }); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int off) {
  return emu::warp_exchange(v, [off](int lane) { return lane ^ off; });
}

// mbarriers and bulk copies (Tuning.fwd_tma's forward; the device versions are PTX in the generated source): an
// mbarrier is one 64-bit word updated atomically (bit 63 the phase, bits 47-62 the arrivals a phase expects, 32-46
// those still due, the low 32 bits the bytes still due, signed); a bulk copy is a memcpy whose bytes then count as
// arrived. emu_bulk_copy_bytes() (extern "C") reports the bytes copied since the library was loaded.
namespace emu {
inline std::atomic<int64_t> bulk_bytes{0};
inline uint64_t mbar_pack(uint64_t phase, uint64_t count, uint64_t due, uint64_t bytes) {
  return phase << 63 | count << 47 | due << 32 | bytes;
}
inline void mbar_update(uint64_t* bar, int arrivals, int64_t bytes) {  // arrivals, and bytes expected (+) or arrived (-)
  std::atomic_ref<uint64_t> a(*bar);
  uint64_t v = a.load();
  for (;;) {
    const uint64_t phase = v >> 63, count = (v >> 47) & 0xffff, due = ((v >> 32) & 0x7fff) - arrivals;
    const int64_t left = int64_t(int32_t(uint32_t(v))) + bytes;
    if (((v >> 32) & 0x7fff) < uint64_t(arrivals)) std::abort();  // more arrivals than the phase expects
    const uint64_t next = due == 0 && left == 0 ? mbar_pack(phase ^ 1, count, count, 0)
                                                : mbar_pack(phase, count, due, uint32_t(int32_t(left)));
    if (a.compare_exchange_weak(v, next)) {
      if ((next ^ v) >> 63) a.notify_all();  // a phase completed: wake its waiters (mbar_wait)
      return;
    }
  }
}
}  // namespace emu
inline void mbar_init(uint64_t* bar, int count) {
  std::atomic_ref<uint64_t>(*bar).store(emu::mbar_pack(0, count, count, 0));
}
inline void mbar_inval(uint64_t*) {}
inline void mbar_init_fence() {}
inline void fence_proxy_async() {}
inline void mbar_arrive(uint64_t* bar) { emu::mbar_update(bar, 1, 0); }
inline void mbar_expect(uint64_t* bar, uint32_t bytes) { emu::mbar_update(bar, 1, int64_t(bytes)); }
inline void mbar_wait(uint64_t* bar, uint32_t parity) {  // sleeps until the phase of that parity has completed
  std::atomic_ref<uint64_t> a(*bar);
  for (uint64_t v = a.load(); (v >> 63) == parity; v = a.load()) a.wait(v);
}
inline void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 15) std::abort();  // sm_90's rule
  std::memcpy(dst, src, bytes);
  emu::bulk_bytes += bytes;
  emu::mbar_update(bar, 0, -int64_t(bytes));
}
inline void bulk_copy_hint(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t) {  // (no L2 here)
  bulk_copy(dst, src, bytes, bar);
}
extern "C" int64_t emu_bulk_copy_bytes() { return emu::bulk_bytes.load(); }
