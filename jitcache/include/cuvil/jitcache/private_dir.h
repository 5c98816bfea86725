// Folders whose files the server trusts as its own: the JIT cache (native code it maps and runs)
// and the snapshot folder (artifacts it restores as native code). Their checksums are unkeyed, so
// anyone who can write such a folder can make the server run their code, and anyone who can read
// it reads compiled weights and ONNX sources: they must belong to the server's user and be
// writable by no one else. Files in them are created 0600 and folders 0700.
#ifndef CUVIL_JITCACHE_PRIVATE_DIR_H_
#define CUVIL_JITCACHE_PRIVATE_DIR_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cuvil {

// Mode of the files written in a trusted folder, and of a folder created for one.
inline constexpr unsigned kPrivateFileMode = 0600;
inline constexpr unsigned kPrivateDirMode = 0700;

// Creates `dir` (missing parents with the default mode, `dir` itself 0700) when it does not exist,
// then checks that it is a directory owned by this process's effective user and not writable by
// group or others; then makes this user's files in it 0600 (an older version wrote them 0644).
// With `allow_insecure` a failed owner/mode check is only logged. `what` names
// the folder in messages ("JIT cache directory") and `flag` the option that allows it
// ("--insecure-cache-dir"). FailedPrecondition naming the folder, its owner, its mode and `flag`
// when it is not trusted; InvalidArgument when it cannot be created or is not a directory.
// Thread-safe.
absl::Status EnsurePrivateDir(const std::string& dir, bool allow_insecure, const std::string& what,
                              const std::string& flag);

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_PRIVATE_DIR_H_
