// Private: copies in and out of memory mappings of files that another process may shrink.
#ifndef CUVIL_SERVER_SRC_BUS_ERROR_GUARD_H_
#define CUVIL_SERVER_SRC_BUS_ERROR_GUARD_H_

#include <cstddef>

namespace cuvil {

// Copies `bytes` bytes from `src` to `dst` (which must not overlap) and returns true, or returns
// false when the copy touched a page of a shared mapping beyond the end of its file (SIGBUS: the
// owner truncated it) — then an unspecified prefix of `dst` was written and the process goes on.
// A SIGBUS anywhere else still reaches the handler installed before the first call (or kills
// the process by default). Thread-safe; installs a process-wide SIGBUS handler on first use.
bool CopyCatchingBusErrors(void* dst, const void* src, size_t bytes);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_BUS_ERROR_GUARD_H_
