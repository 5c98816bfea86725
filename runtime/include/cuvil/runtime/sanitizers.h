// Which sanitizer this translation unit is built with, for code that must behave differently
// under one (an address-space limit ASan's shadow memory would break, a block cache that would
// hide a use after free). GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang (the
// sanitizer and fuzz trees' compiler) answers through __has_feature instead.
#ifndef CUVIL_RUNTIME_SANITIZERS_H_
#define CUVIL_RUNTIME_SANITIZERS_H_

#if defined(__SANITIZE_ADDRESS__)
#define CUVIL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUVIL_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define CUVIL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUVIL_TSAN 1
#endif
#endif

#endif  // CUVIL_RUNTIME_SANITIZERS_H_
