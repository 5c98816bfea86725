// wasm32-wasi AOT runtime only: the host's libstdc++ configuration, minus what WASI lacks.
// wasi-libc ships no C++ library, so the runtime's header-only uses of the C++ library (vector,
// algorithm, atomic, limits, cmath) compile against the host's libstdc++ headers. This directory
// comes first on the include path; the runtime uses no threads, locales or iostreams.
#ifndef CUVIL_RUNTIME_AOT_WASM32_CXX_CONFIG_H_
#define CUVIL_RUNTIME_AOT_WASM32_CXX_CONFIG_H_

// glibc's version check, which libstdc++'s Linux os_defines.h uses; wasi-libc is not glibc.
#define __GLIBC_PREREQ(maj, min) 0

#include_next <bits/c++config.h>

// No threads (gthr-default.h maps to the single-threaded model) and no futex waits.
#undef _GLIBCXX_HAS_GTHREADS
#undef _GLIBCXX_HAVE_LINUX_FUTEX
#undef _GLIBCXX_USE_PTHREAD_COND_CLOCKWAIT

#endif  // CUVIL_RUNTIME_AOT_WASM32_CXX_CONFIG_H_
