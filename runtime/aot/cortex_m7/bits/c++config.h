// Cortex-M7 (thumbv7em-none-eabihf) AOT runtime only: arm-none-eabi's libstdc++ configuration plus
// what newlib has but that configuration leaves out. This directory comes first on the include
// path of the cortex-m7 runtime build (runtime/aot/CMakeLists.txt).
#ifndef CUVIL_RUNTIME_AOT_CORTEX_M7_CXX_CONFIG_H_
#define CUVIL_RUNTIME_AOT_CORTEX_M7_CXX_CONFIG_H_

#include_next <bits/c++config.h>

// newlib's <stdlib.h> declares aligned_alloc (C11); libstdc++'s <cstdlib> brings it into std only
// when this is set.
#ifndef _GLIBCXX_HAVE_ALIGNED_ALLOC
#define _GLIBCXX_HAVE_ALIGNED_ALLOC 1
#endif

#endif  // CUVIL_RUNTIME_AOT_CORTEX_M7_CXX_CONFIG_H_
