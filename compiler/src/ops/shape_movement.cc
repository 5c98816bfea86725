// Shape inference for the movement op family.
#include "op_registry.h"

namespace cuvil::ir {

void RegisterMovementShapes(OpRegistry& r) {}

}  // namespace cuvil::ir
