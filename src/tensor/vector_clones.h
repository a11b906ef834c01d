// Marks a kernel to be compiled for AVX-512, AVX2 and the baseline, with the best one chosen when
// the library is loaded (GCC function multiversioning, an ifunc): the library itself is built for
// baseline x86-64, and element-wise loops gain 2-4x from wider vectors. Only on definitions.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TPF_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TPF_VECTOR_CLONES
#endif
