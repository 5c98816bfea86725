// How cuvil-admin prints responses: aligned text tables for people, JSON for scripts (pure).
#ifndef CUVIL_TOOLS_CUVIL_ADMIN_OUTPUT_H_
#define CUVIL_TOOLS_CUVIL_ADMIN_OUTPUT_H_

#include <string>
#include <vector>

#include "admin.pb.h"
#include "google/protobuf/message.h"
#include "grpc_service.pb.h"

namespace cuvil::admin_cli {

// Columns padded to their widest cell, two spaces apart, header first; ends with a newline.
// Rows shorter than the header are padded with empty cells.
std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// The message as one JSON object (proto field names, zero values included) and a newline.
std::string RenderJson(const google::protobuf::Message& message);

// Human-readable renderings of each response.
std::string RenderModels(const cuvil::admin::v1::ListModelsResponse& r);
std::string RenderIndex(const inference::RepositoryIndexResponse& r);
std::string RenderFunctions(const cuvil::admin::v1::ListFunctionsResponse& r);
std::string RenderPatches(const cuvil::admin::v1::ListPatchesResponse& r);
std::string RenderPatch(const cuvil::admin::v1::PatchFunctionResponse& r);
std::string RenderLoad(const cuvil::admin::v1::LoadModelResponse& r);
// One row per open sequence: id (a string id quoted), model, version, steps, the step of its
// last checkpoint ("-": none), state bytes, idle seconds, activity.
std::string RenderSequences(const cuvil::admin::v1::ListSequencesResponse& r);
// A profile patch's per-kernel table (calls, total ms, mean us, share) with a total row.
std::string RenderProfile(
    const google::protobuf::RepeatedPtrField<cuvil::admin::v1::KernelProfile>& table);

// "1.5 MiB" style byte counts.
std::string HumanBytes(uint64_t bytes);

}  // namespace cuvil::admin_cli

#endif  // CUVIL_TOOLS_CUVIL_ADMIN_OUTPUT_H_
