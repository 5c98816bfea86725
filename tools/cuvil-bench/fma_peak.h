// The host's measured FP32 multiply-add peak, the yardstick of cuvil-bench --peak.
#ifndef CUVIL_TOOLS_CUVIL_BENCH_FMA_PEAK_H_
#define CUVIL_TOOLS_CUVIL_BENCH_FMA_PEAK_H_

namespace cuvil {

struct FmaPeak {
  double gflops = 0;    // 2 flops per lane per FMA, over all threads.
  int vector_bits = 0;  // Width of the FMAs that reached it (512, 256, or 0 without FMA).
};

// Runs independent chains of register-only FMAs (enough to cover the FMA latency on every x86
// core we know) on `threads` (>= 1) threads at once for about `seconds` and returns the best rate
// of the widest vector width the CPU supports, or of 256 bits where that is faster (a core that
// splits 512-bit FMAs in two reaches the same rate with either). Thread-compatible: call it while
// nothing else runs, or the figure is low.
FmaPeak MeasureFmaPeak(int threads, double seconds);

}  // namespace cuvil

#endif  // CUVIL_TOOLS_CUVIL_BENCH_FMA_PEAK_H_
