// Private: cuvil.admin.v1.ModelAdmin on gRPC's completion-queue API.
#ifndef CUVIL_SERVER_SRC_GRPC_ADMIN_CALLS_H_
#define CUVIL_SERVER_SRC_GRPC_ADMIN_CALLS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "admin.grpc.pb.h"
#include "admin_operations.h"
#include "grpc_unary_call.h"

namespace cuvil {

// Sizes the admin methods enforce.
struct AdminCallLimits {
  // Largest unary Snapshot answer: larger ones are refused with a pointer to SnapshotStream.
  int64_t max_message_bytes = 64 << 20;
  // Largest artifact RestoreSnapshotStream accepts.
  int64_t max_snapshot_bytes = int64_t{4} << 30;
};

// Appends every method of `service` to `methods`, none armed yet. Calls that load, unload,
// patch, roll back, snapshot, restore or end a sequence run on `context.blocking_pool`; the
// listings run on the polling thread. Every call needs the admin token when one is set. `service`
// and `admin` outlive the methods.
void AddAdminMethods(const CallContext& context, const AdminCallLimits& limits,
                     cuvil::admin::v1::ModelAdmin::AsyncService* service, AdminOperations* admin,
                     std::vector<std::unique_ptr<ArmedMethod>>* methods);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_ADMIN_CALLS_H_
