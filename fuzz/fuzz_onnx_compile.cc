// ONNX bytes -> import -> IR passes -> LLVM -> object code; a model that compiles is then linked
// into the JIT and run once at batch 1 on zero inputs (its data-dependent checks included).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuvil/compiler/compiler.h"
#include "fuzz_support.h"

namespace {

// Bytes a batch-1 run may allocate for one tensor or the arena; larger models are compiled but
// not run (a legitimate model may declare big tensors; that is not a finding).
constexpr int64_t kMaxRunBytes = int64_t{64} << 20;

// Bytes of a tensor at batch 1, or -1 when negative, overflowing or above kMaxRunBytes.
int64_t BytesAtBatch1(const cuvil::TensorSignature& t, std::vector<int64_t>* shape) {
  int64_t bytes = cuvil::DTypeSize(t.dtype);
  if (bytes <= 0) return -1;
  for (const cuvil::SymDim& d : t.shape) {
    int64_t v = d.Eval(1);
    if (v < 0 || (v != 0 && bytes > kMaxRunBytes / v)) return -1;
    bytes *= v;
    if (shape != nullptr) shape->push_back(v);
  }
  return bytes;
}

void RunOnce(cuvil::CompiledModel model) {
  std::vector<cuvil::HostTensor> inputs;
  for (const cuvil::TensorSignature& in : model.inputs) {
    std::vector<int64_t> shape;
    if (BytesAtBatch1(in, &shape) < 0) return;
    inputs.emplace_back(in.dtype, std::move(shape));
  }
  for (const cuvil::TensorSignature& out : model.outputs) {
    if (BytesAtBatch1(out, nullptr) < 0) return;
  }
  const int64_t arena = model.arena.BytesFor(1);
  if (arena < 0 || arena > kMaxRunBytes) return;
  static std::atomic<uint64_t> next{0};
  absl::StatusOr<std::unique_ptr<cuvil::LoadedModel>> loaded =
      cuvil::fuzz::Jit().Load(absl::StrCat("fuzz/", next++), std::move(model));
  if (!loaded.ok()) return;
  // Errors (a bad index in the zero data, say) are answers, not findings.
  (void)(*loaded)->Run(inputs);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cuvil::fuzz::QuietLogs();
  cuvil::fuzz::Jit();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<cuvil::CompiledModel> compiled =
      cuvil::CompileOnnxBytes(std::string(reinterpret_cast<const char*>(data), size));
  if (compiled.ok()) RunOnce(*std::move(compiled));
  return 0;
}
