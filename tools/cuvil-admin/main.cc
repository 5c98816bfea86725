// cuvil-admin: command-line client of Cuvil's admin API (see args.cc for the verbs).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "args.h"
#include "commands.h"

int main(int argc, char** argv) {
  using namespace cuvil::admin_cli;
  std::vector<std::string> raw(argv + 1, argv + argc);
  absl::StatusOr<AdminArgs> args = ParseArgs(raw);
  if (!args.ok()) {
    std::fprintf(stderr, "cuvil-admin: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help || args->verb == Verb::kNone) {
    std::fputs(UsageText(args->verb).c_str(), stdout);
    return 0;
  }
  std::string out;
  absl::Status s = RunCommand(*args, &out);
  std::fputs(out.c_str(), stdout);
  if (!s.ok()) {
    std::fprintf(stderr, "cuvil-admin %s: %s: %s\n", VerbName(args->verb),
                 absl::StatusCodeToString(s.code()).c_str(), std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
