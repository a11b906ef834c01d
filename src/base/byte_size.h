// Byte counts as people read them, in binary units (1 KiB = 1024 B): the one place that spells
// sizes for messages, reports and tables.
#pragma once

#include <cstddef>
#include <string>

namespace tpf::base {

// "1.5 GiB", "640.0 KiB", "12 B": the largest unit (up to TiB) the value reaches, with `decimals`
// digits after the point; plain bytes are whole. For measurements and estimates.
std::string format_bytes(double bytes, int decimals = 1);

// "64 MiB", "3 KiB", "1000 B": the largest unit that divides the count, so the text is exact. For
// configured sizes (slots, caches) where a rounded value would misstate what was set.
std::string format_exact_bytes(size_t bytes);

}  // namespace tpf::base
