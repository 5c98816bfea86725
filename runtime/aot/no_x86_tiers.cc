// The x86 tiers' table functions for CPUs without them (AArch64 AOT runtimes): none, so the
// dispatcher runs the generic tier.
#include "ukernel_table.h"

namespace cuvil::uk {

const Table* Avx2Table() { return nullptr; }
const Table* Avx512Table() { return nullptr; }

}  // namespace cuvil::uk
