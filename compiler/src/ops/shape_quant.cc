// Shape inference for the quant op family.
#include "op_registry.h"

namespace cuvil::ir {

void RegisterQuantShapes(OpRegistry& r) {}

}  // namespace cuvil::ir
