#include "cuvil/jitcache/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cuvil {

namespace fs = std::filesystem;

namespace {

// Makes every regular file of this user directly in `dir` 0600 (files an older version wrote
// 0644 stay readable by others until they are rewritten otherwise). Never follows a symlink;
// best effort.
void TightenFileModes(const std::string& dir) {
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    const int fd = open(de.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        (st.st_mode & 077) != 0) {
      fchmod(fd, kPrivateFileMode);
    }
    close(fd);
  }
}

}  // namespace

absl::Status EnsurePrivateDir(const std::string& dir, bool allow_insecure, const std::string& what,
                              const std::string& flag) {
  if (dir.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty path"));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", dir, ": ", std::strerror(errno)));
    }
    std::error_code ec;
    const fs::path parent = fs::path(dir).lexically_normal().parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (mkdir(dir.c_str(), kPrivateDirMode) != 0 && errno != EEXIST) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", dir, ": cannot create it: ", std::strerror(errno)));
    }
    if (stat(dir.c_str(), &st) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", dir, ": ", std::strerror(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", dir, ": not a directory"));
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  std::string why;
  if (st.st_uid != geteuid()) {
    why = absl::StrCat("is owned by uid ", st.st_uid, ", not by this server's uid ", geteuid(),
                       " (mode ", mode, ")");
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    why = absl::StrCat("is writable by ", (st.st_mode & S_IWOTH) != 0 ? "others" : "group",
                       " (mode ", mode, ")");
  }
  if (why.empty()) {
    TightenFileModes(dir);
    return absl::OkStatus();
  }
  const std::string message = absl::StrCat(
      what, " ", dir, " ", why,
      ": another user could plant code the server would run. Use a folder of your own with mode "
      "0700 (chmod 700 ",
      dir, "), or pass ", flag, " to use it anyway");
  if (allow_insecure) {
    spdlog::warn("{} (allowed by {})", message, flag);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(message);
}

}  // namespace cuvil
