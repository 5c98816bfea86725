#include "output.h"

#include <algorithm>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace cuvil::admin_cli {

std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header);
  for (const auto& row : rows) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      absl::StrAppend(&line, cell);
      // No trailing blanks after the last column.
      if (i + 1 < width.size()) line.append(width[i] - cell.size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, line, "\n");
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string RenderJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  // Cannot fail for a generated message without Any fields.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out + "\n";
}

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

namespace {

std::string UnixMs(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrFormat("%s.%03dZ", buf, static_cast<int>(ms % 1000));
}

}  // namespace

std::string RenderModels(const cuvil::admin::v1::ListModelsResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : r.models()) {
    const bool ready = m.state() == "READY";
    rows.push_back({m.name(), absl::StrCat(m.version()), m.state(), ready ? m.namespace_() : "-",
                    ready ? absl::StrFormat("%.1f", m.compile_ms()) : "-",
                    ready ? HumanBytes(m.weights_bytes()) : "-",
                    ready ? HumanBytes(m.code_bytes()) : "-",
                    ready && !m.cuvil_precision().empty() ? m.cuvil_precision() : "-", m.reason()});
  }
  return RenderTable({"MODEL", "VERSION", "STATE", "NAMESPACE", "COMPILE_MS", "WEIGHTS", "CODE",
                      "PRECISION", "REASON"},
                     rows);
}

std::string RenderIndex(const inference::RepositoryIndexResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : r.models()) {
    rows.push_back({m.name(), m.version().empty() ? "-" : m.version(), m.state(), m.reason()});
  }
  return RenderTable({"MODEL", "VERSION", "STATE", "REASON"}, rows);
}

std::string RenderFunctions(const cuvil::admin::v1::ListFunctionsResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& f : r.functions()) {
    rows.push_back({absl::StrCat(f.index()), f.symbol(), f.op_type(),
                    f.precision().empty() ? "-" : f.precision(), f.node_name(), f.signature()});
  }
  return RenderTable({"INDEX", "SYMBOL", "OP", "PRECISION", "NODE", "SIGNATURE"}, rows);
}

std::string RenderPatches(const cuvil::admin::v1::ListPatchesResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : r.patches()) {
    rows.push_back(
        {p.patch_id(), UnixMs(p.unix_ms()), p.kind(),
         p.active() ? "active" : absl::StrCat("rolled back ", UnixMs(p.rolled_back_unix_ms())),
         p.author().empty() ? "-" : p.author(), absl::StrJoin(p.functions(), ",")});
  }
  return RenderTable({"ID", "TIME", "KIND", "STATE", "AUTHOR", "FUNCTIONS"}, rows);
}

std::string RenderProfile(
    const google::protobuf::RepeatedPtrField<cuvil::admin::v1::KernelProfile>& table) {
  std::vector<std::vector<std::string>> rows;
  uint64_t total = 0;
  for (const auto& k : table) {
    rows.push_back({k.function(), absl::StrCat(k.calls()),
                    absl::StrFormat("%.3f", static_cast<double>(k.total_ns()) / 1e6),
                    absl::StrFormat("%.1f", k.mean_ns() / 1e3),
                    absl::StrFormat("%.1f%%", k.share() * 100)});
    total += k.total_ns();
  }
  rows.push_back({"total", "", absl::StrFormat("%.3f", static_cast<double>(total) / 1e6)});
  return RenderTable({"FUNCTION", "CALLS", "TOTAL_MS", "MEAN_US", "SHARE"}, rows);
}

std::string RenderPatch(const cuvil::admin::v1::PatchFunctionResponse& r) {
  std::string out = absl::StrFormat(
      "patch %s applied: %s\n  compile %.2f ms, switch %.1f us, validation max abs diff %g\n",
      r.patch_id(), absl::StrJoin(r.functions(), ","), r.compile_ms(), r.switch_us(),
      r.max_abs_diff());
  if (r.profile_size() > 0) absl::StrAppend(&out, RenderProfile(r.profile()));
  return out;
}

std::string RenderLoad(const cuvil::admin::v1::LoadModelResponse& r) {
  return absl::StrCat("model ", r.name(), " loaded; versions: ", absl::StrJoin(r.versions(), ","),
                      "\n");
}

std::string RenderSequences(const cuvil::admin::v1::ListSequencesResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& q : r.sequences()) {
    rows.push_back({q.string_sequence_id().empty()
                        ? absl::StrCat(q.sequence_id())
                        : absl::StrCat("\"", q.string_sequence_id(), "\""),
                    q.model(), absl::StrCat(q.version()), absl::StrCat(q.steps()),
                    q.checkpoint_step() > 0 ? absl::StrCat(q.checkpoint_step()) : "-",
                    HumanBytes(static_cast<uint64_t>(q.state_bytes())),
                    absl::StrFormat("%.1f", q.idle_seconds()),
                    q.running() ? absl::StrCat("running+", q.pending_steps()) : "idle"});
  }
  return RenderTable(
      {"ID", "MODEL", "VERSION", "STEPS", "CHECKPOINT", "STATE", "IDLE_S", "ACTIVITY"}, rows);
}

}  // namespace cuvil::admin_cli
