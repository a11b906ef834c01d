# The reduction-kernel micro-benchmark (Google Benchmark). Included from bench/CMakeLists.txt.
find_package(benchmark REQUIRED)

add_executable(tpf_kernels_bench ${CMAKE_CURRENT_LIST_DIR}/kernels_bench.cc)
# The benchmark drives the internal kernel interface (src/coll/reduce_kernels.h) directly.
target_include_directories(tpf_kernels_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tpf_kernels_bench PRIVATE tpfabric_static benchmark::benchmark)
