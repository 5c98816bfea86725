// The quantized convolution microkernel on the shapes that dominate the INT8 zoo models, each on
// the best tier with its fused tile+epilogue (QTable::tile_store) and with the int32 tile stored
// and requantised row by row. Run: build/bin/cuvil-qconv-bench [--benchmark_repetitions=5].
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

struct Shape {
  int64_t c, hw, m, k, stride;
};

// Pointwise and 3x3 convolutions of mobilenet_v2 and resnet18 (one image).
constexpr Shape kShapes[] = {
    {16, 112, 96, 1, 1},   // mobilenet features.2 expand
    {96, 56, 24, 1, 1},    // mobilenet features.2 project
    {144, 28, 32, 1, 1},   // mobilenet features.4 project
    {64, 56, 64, 3, 1},    // resnet18 layer1
    {128, 28, 128, 3, 1},  // resnet18 layer2
    {64, 56, 128, 3, 2},   // resnet18 layer2 downsample path
    {3, 224, 64, 7, 2},    // resnet18 stem (conv1)
    {512, 7, 512, 3, 1},   // resnet18 layer4
};

void BM_QConv(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  const bool fused = state.range(1) != 0;
  cuvil_uk_qconv_params qp{};
  cuvil_uk_conv_params& p = qp.conv;
  p.channels = s.c;
  p.height = p.width = s.hw;
  p.out_channels = s.m;
  p.kernel_h = p.kernel_w = s.k;
  p.stride_h = p.stride_w = s.stride;
  p.dilation_h = p.dilation_w = 1;
  p.pad_top = p.pad_left = s.k / 2;
  p.out_height = p.out_width = (s.hw + 2 * (s.k / 2) - s.k) / s.stride + 1;
  qp.out_type = CUVIL_UK_QOUT_U8;
  const int64_t k = s.c * s.k * s.k;
  std::vector<uint8_t> x(static_cast<size_t>(s.c * s.hw * s.hw));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 37);
  std::vector<int8_t> w(static_cast<size_t>(s.m * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int8_t>(i * 11);
  std::vector<int8_t> packed(static_cast<size_t>(cuvil_uk_qconv_weights_size(s.m, k)));
  std::vector<int32_t> sums(static_cast<size_t>(s.m)), comp(static_cast<size_t>(s.m));
  cuvil_uk_pack_qconv_weights(w.data(), s.m, k, packed.data(), sums.data());
  std::vector<float> mult(static_cast<size_t>(s.m), 1.0f / 4096), bias(static_cast<size_t>(s.m), 3);
  std::vector<uint8_t> y(static_cast<size_t>(s.m * p.out_height * p.out_width));
  uk::QTable table = uk::ActiveQTable();
  if (!fused) table.tile_store = nullptr;
  if (fused && table.tile_store == nullptr) {
    state.SkipWithError("this tier has no fused epilogue");
    return;
  }
  for (auto _ : state) {
    uk::QConv2d(table, qp, x.data(), packed.data(), comp.data(), mult.data(), bias.data(), nullptr,
                y.data(), 1, 0, 255);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(table.name);
  state.counters["MAC/s"] =
      benchmark::Counter(static_cast<double>(s.m * k * p.out_height * p.out_width),
                         benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_QConv)->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace cuvil

BENCHMARK_MAIN();
