#include "cuvil/compiler/kernel_precision.h"

#include "gtest/gtest.h"

namespace cuvil {
namespace {

KernelFunction Kernel(std::string op, std::string signature) {
  KernelFunction k;
  k.op_type = std::move(op);
  k.signature = std::move(signature);
  return k;
}

TEST(KernelPrecisionTest, IntegerOpsAreInt8AndOthersTheirFloatOrOutputType) {
  EXPECT_EQ(KernelPrecision(Kernel("CuvilQConv", "(uint8[batch,3,8,8]) -> uint8[batch,4,8,8]")),
            "int8");
  EXPECT_EQ(KernelPrecision(Kernel("MatMulInteger", "(uint8[2,3], int8[3,4]) -> int32[2,4]")),
            "int8");
  EXPECT_EQ(KernelPrecision(Kernel("MatMulNBits",
                                   "(float32[batch,64], uint8[8,2,16], float32[16], float32[16]) "
                                   "-> float32[batch,8]")),
            "int4");
  EXPECT_EQ(KernelPrecision(Kernel("Gemm",
                                   "(float32[batch,784], float32[512,784]) -> "
                                   "float32[batch,512]")),
            "float32");
  // Quantize/DequantizeLinear and half-precision storage compute in float32.
  EXPECT_EQ(KernelPrecision(Kernel("QuantizeLinear", "(float32[4], float32[]) -> uint8[4]")),
            "float32");
  EXPECT_EQ(KernelPrecision(Kernel("Add", "(float16[4], float16[4]) -> float16[4]")), "float32");
  EXPECT_EQ(KernelPrecision(Kernel("Add", "(bfloat16[4]) -> bfloat16[4]")), "float32");
  EXPECT_EQ(KernelPrecision(Kernel("Cast", "(float32[4]) -> float64[4]")), "float64");
  EXPECT_EQ(KernelPrecision(Kernel("Equal", "(int64[batch], int64[1]) -> bool[batch]")), "bool");
  EXPECT_EQ(KernelPrecision(Kernel("Relu", "no types")), "unknown");
}

TEST(KernelPrecisionTest, SummaryCountsMostFrequentFirst) {
  std::vector<KernelFunction> kernels = {Kernel("Gemm", "(float32[1]) -> float32[1]"),
                                         Kernel("CuvilQConv", "(uint8[1]) -> uint8[1]"),
                                         Kernel("CuvilQConv", "(uint8[1]) -> uint8[1]"),
                                         Kernel("Range", "(int64[], int64[]) -> int64[n]")};
  EXPECT_EQ(PrecisionSummary(kernels), "int8:2 float32:1 int64:1");
  EXPECT_EQ(PrecisionSummary({}), "");
}

}  // namespace
}  // namespace cuvil
