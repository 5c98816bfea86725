#include "accepted_shapes.h"

#include <algorithm>
#include <utility>

namespace cuvil {

std::optional<std::vector<std::vector<int64_t>>> InputShapesAt(const CompiledModel& model,
                                                               const std::vector<int64_t>& syms) {
  std::vector<std::vector<int64_t>> shapes;
  for (const TensorSignature& sig : model.inputs) {
    std::optional<std::vector<int64_t>> shape = EvalShape(sig.shape, syms);
    if (!shape) return std::nullopt;
    shapes.push_back(*std::move(shape));
  }
  return shapes;
}

std::optional<std::vector<int64_t>> AcceptedSymbols(const LoadedModel& loaded, int64_t batch,
                                                    std::initializer_list<int64_t> sizes) {
  const CompiledModel& model = loaded.model();
  const bool leading_batch =
      std::any_of(model.inputs.begin(), model.inputs.end(), [](const TensorSignature& sig) {
        return !sig.shape.empty() && !sig.shape[0].IsStatic() && sig.shape[0].coef() == 1 &&
               sig.shape[0].power() == 1;
      });
  for (int64_t size : sizes) {
    std::vector<int64_t> syms(model.InputSymbolCount(), size);
    if (leading_batch) syms[0] = batch;
    std::optional<std::vector<std::vector<int64_t>>> shapes = InputShapesAt(model, syms);
    if (shapes && loaded.ResolveSymbols(*shapes).ok()) return syms;
  }
  return std::nullopt;
}

}  // namespace cuvil
