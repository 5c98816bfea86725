// Shape inference for the reduction op family.
#include "op_registry.h"

namespace cuvil::ir {

void RegisterReductionShapes(OpRegistry& r) {}

}  // namespace cuvil::ir
