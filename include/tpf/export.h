// What libtpfabric.so exports: the library is compiled with hidden visibility, and the public
// headers open their namespace with TPF_API, so only the public API (these headers and the C API
// of tpf_c.h) is in the shared library's dynamic symbol table. cmake/tpfabric.map hides the rest
// (template instantiations of the standard library made inside the library).
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define TPF_API __attribute__((visibility("default")))
#define TPF_LOCAL __attribute__((visibility("hidden")))  // inside an exported class
#else
#define TPF_API
#define TPF_LOCAL
#endif
