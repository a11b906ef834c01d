// IEEE binary16 (f16) and bfloat16 (bf16) conversions. Narrowing rounds to nearest, ties to even;
// NaN stays NaN (quiet), infinities and signed zeros are preserved.
#pragma once

#include "tpf/export.h"

#include <cstdint>

namespace TPF_API tpf {

float f16_to_f32(uint16_t bits) noexcept;
uint16_t f32_to_f16(float value) noexcept;
float bf16_to_f32(uint16_t bits) noexcept;
uint16_t f32_to_bf16(float value) noexcept;

}  // namespace tpf
