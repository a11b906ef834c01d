// Google Benchmark of the reduction kernels: reduce_n sum over dtypes, source counts, sizes and
// instruction sets. bytes_per_second counts the memory traffic of one call: every source read once
// plus the destination written once, i.e. (nsrcs + 1) * bytes per source.
//
//   tpf_kernels_bench --benchmark_filter='f32/avx512/nsrcs:8' --benchmark_min_time=0.1
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coll/reduce_kernels.h"
#include "tpf/dtype.h"
#include "tpf/half.h"

namespace tpf::coll {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// Page-aligned, touched (so page faults are not timed) and filled with small finite values.
Buffer make_buffer(DType dtype, size_t bytes, int seed) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  Buffer buf(static_cast<unsigned char*>(std::aligned_alloc(4096, rounded)));
  if (!buf) return buf;
  const size_t size = dtype_size(dtype);
  for (size_t i = 0; i < bytes / size; ++i) {
    const float v = static_cast<float>((i * 7 + static_cast<size_t>(seed)) % 19) - 9.0f;
    unsigned char* p = buf.get() + i * size;
    switch (dtype) {
      case DType::f32: std::memcpy(p, &v, 4); break;
      case DType::f16: {
        const uint16_t h = f32_to_f16(v);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::bf16: {
        const uint16_t h = f32_to_bf16(v);
        std::memcpy(p, &h, 2);
        break;
      }
      default: {
        const auto x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
    }
  }
  return buf;
}

void bench_reduce(benchmark::State& state, DType dtype, const char* isa, int nsrcs, size_t bytes) {
  if (!set_reduce_isa_for_testing(isa)) {
    state.SkipWithError("this CPU cannot run this instruction set");
    return;
  }
  std::vector<Buffer> bufs;
  std::vector<const void*> srcs;
  for (int s = 0; s < nsrcs; ++s) {
    bufs.push_back(make_buffer(dtype, bytes, s));
    srcs.push_back(bufs.back().get());
  }
  Buffer dst = make_buffer(dtype, bytes, 99);
  for (const Buffer& b : bufs) {
    if (!b) {
      state.SkipWithError("out of memory");
      set_reduce_isa_for_testing(nullptr);
      return;
    }
  }
  if (!dst) {
    state.SkipWithError("out of memory");
    set_reduce_isa_for_testing(nullptr);
    return;
  }
  const size_t count = bytes / dtype_size(dtype);
  for (auto _ : state) {
    reduce_n(dtype, ReduceOp::sum, dst.get(), srcs.data(), nsrcs, count);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>((nsrcs + 1) * bytes));
  state.counters["bytes_per_src"] = static_cast<double>(bytes);
  set_reduce_isa_for_testing(nullptr);
}

void register_all() {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
    for (const char* isa : {"scalar", "avx2", "avx512"}) {
      for (int nsrcs : {2, 4, 8}) {
        for (size_t bytes = size_t{4} << 10; bytes <= size_t{64} << 20; bytes *= 4) {
          const std::string name = std::string("reduce_sum/") + dtype_name(dtype) + "/" + isa +
                                   "/nsrcs:" + std::to_string(nsrcs) +
                                   "/bytes:" + std::to_string(bytes);
          benchmark::RegisterBenchmark(name.c_str(), bench_reduce, dtype, isa, nsrcs, bytes)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tpf::coll

int main(int argc, char** argv) {
  tpf::coll::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
