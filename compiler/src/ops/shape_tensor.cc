// Shape inference for the tensor op family.
#include "op_registry.h"

namespace cuvil::ir {

void RegisterTensorShapes(OpRegistry& r) {}

}  // namespace cuvil::ir
