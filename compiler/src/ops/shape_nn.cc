// Shape inference for the nn op family.
#include "op_registry.h"

namespace cuvil::ir {

void RegisterNnShapes(OpRegistry& r) {}

}  // namespace cuvil::ir
