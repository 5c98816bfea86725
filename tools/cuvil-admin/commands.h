// Executes one cuvil-admin command: reads the files it names, makes the gRPC call and renders
// the response.
#ifndef CUVIL_TOOLS_CUVIL_ADMIN_COMMANDS_H_
#define CUVIL_TOOLS_CUVIL_ADMIN_COMMANDS_H_

#include <string>

#include "absl/status/status.h"
#include "args.h"

namespace cuvil::admin_cli {

// Runs `args` (a parsed command with a verb) against the server at args.url and appends what to
// print to `out`. A file that cannot be read or written is InvalidArgument / Internal; a failed
// call returns the server's status (code and message) unchanged. Thread-compatible.
absl::Status RunCommand(const AdminArgs& args, std::string* out);

}  // namespace cuvil::admin_cli

#endif  // CUVIL_TOOLS_CUVIL_ADMIN_COMMANDS_H_
