#include "cuvil/runtime/half.h"

#include <cstring>

namespace cuvil {
namespace {

uint32_t Bits(float v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float v = 0;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

}  // namespace

float HalfToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) return FromBits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float32.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign != 0 ? -v : v;
  }
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float v) {
  uint32_t u = Bits(v);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf / NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // Rounds above the largest half: infinity.
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): round abs / 2^-24 to an integer, ties to even.
    float scaled = FromBits(abs) * 16777216.0f;  // exact: a power-of-two scale
    uint32_t whole = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(whole);
    if (frac > 0.5f || (frac == 0.5f && (whole & 1u) != 0)) ++whole;
    return static_cast<uint16_t>(sign | whole);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

float BFloat16ToFloat(uint16_t bits) { return FromBits(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBFloat16(float v) {
  uint32_t u = Bits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace cuvil
