#include "http_client.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client_shared_memory.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace cuvil::perf {
namespace {

using json = nlohmann::json;

constexpr char kHeaderLength[] = "Inference-Header-Content-Length";

absl::StatusCode CodeForHttpStatus(int status) {
  switch (status) {
    case 404:
      return absl::StatusCode::kNotFound;
    case 500:
      return absl::StatusCode::kInternal;
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInvalidArgument;
  }
}

std::string ErrorText(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "connection failed (refused, or no route to the host)";
    case httplib::Error::Read:
      return "connection closed while reading the response";
    case httplib::Error::Write:
      return "connection closed while sending the request";
    default:
      return httplib::to_string(error);
  }
}

// The JSON part of a response (all of it unless the binary extension says otherwise).
absl::string_view JsonPart(const httplib::Response& res) {
  absl::string_view body = res.body;
  uint64_t n = 0;
  if (res.has_header(kHeaderLength) && absl::SimpleAtoi(res.get_header_value(kHeaderLength), &n) &&
      n <= body.size()) {
    body = body.substr(0, n);
  }
  return body;
}

uint64_t U64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer())
    return static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
  return 0;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Duration DurationOf(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return {};
  return Duration{U64(*it, "count"), U64(*it, "ns")};
}

class HttpClient final : public InferClient {
 public:
  HttpClient(const ClientOptions& options, std::string host, int port)
      : options_(options), client_(std::move(host), port) {
    client_.set_keep_alive(true);
    client_.set_tcp_nodelay(true);
    client_.set_connection_timeout(std::chrono::milliseconds(options.timeout_ms));
    client_.set_read_timeout(std::chrono::milliseconds(options.timeout_ms));
    client_.set_write_timeout(std::chrono::milliseconds(options.timeout_ms));
    model_path_ = absl::StrCat("/v2/models/", options.model);
    if (!options.version.empty()) absl::StrAppend(&model_path_, "/versions/", options.version);
  }

  ~HttpClient() override { ReleaseSharedMemory(); }

  absl::StatusOr<ModelInfo> GetModelInfo() override {
    absl::StatusOr<json> meta = GetJson(model_path_, "model metadata");
    if (!meta.ok()) return meta.status();
    ModelInfo info;
    info.name = Str(*meta, "name");
    if (auto it = meta->find("versions"); it != meta->end() && it->is_array()) {
      for (const json& v : *it) {
        if (v.is_string()) info.versions.push_back(v.get<std::string>());
      }
    }
    for (const char* key : {"inputs", "outputs"}) {
      auto it = meta->find(key);
      if (it == meta->end() || !it->is_array()) continue;
      for (const json& t : *it) {
        if (!t.is_object()) continue;
        TensorInfo ti{Str(t, "name"), Str(t, "datatype"), {}};
        if (auto s = t.find("shape"); s != t.end() && s->is_array()) {
          for (const json& d : *s)
            ti.shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
        }
        (key[0] == 'i' ? info.inputs : info.outputs).push_back(std::move(ti));
      }
    }
    absl::StatusOr<json> config = GetJson(model_path_ + "/config", "model config");
    if (config.ok()) {
      auto it = config->find("max_batch_size");
      info.max_batch_size = it != config->end() && it->is_number_integer() ? it->get<int64_t>() : 0;
      if (auto sb = config->find("sequence_batching"); sb != config->end() && sb->is_object()) {
        info.sequence_batching = true;
        std::vector<std::string> filled, states;
        if (auto c = sb->find("control_input"); c != sb->end() && c->is_array()) {
          for (const json& ci : *c) filled.push_back(Str(ci, "name"));
        }
        if (auto st = sb->find("state"); st != sb->end() && st->is_array()) {
          for (const json& one : *st) {
            filled.push_back(Str(one, "input_name"));
            states.push_back(Str(one, "output_name"));
          }
        }
        RemoveSequenceTensors(filled, states, &info);
      }
    } else if (absl::IsUnimplemented(config.status()) || absl::IsNotFound(config.status())) {
      info.max_batch_size = -1;  // Unknown: the caller guesses from the shapes.
    } else {
      return config.status();
    }
    return info;
  }

  absl::StatusOr<ServerStats> GetStatistics() override {
    absl::StatusOr<json> doc = GetJson(model_path_ + "/stats", "model statistics");
    if (!doc.ok()) return doc.status();
    ServerStats out;
    auto list = doc->find("model_stats");
    if (list == doc->end() || !list->is_array()) {
      return absl::InternalError("model statistics: the response has no 'model_stats' array");
    }
    auto add = [](const Duration& d, Duration* to) {
      to->count += d.count;
      to->ns += d.ns;
    };
    for (const json& m : *list) {
      if (!m.is_object()) continue;
      out.inference_count += U64(m, "inference_count");
      out.execution_count += U64(m, "execution_count");
      if (auto is = m.find("inference_stats"); is != m.end() && is->is_object()) {
        add(DurationOf(*is, "success"), &out.success);
        add(DurationOf(*is, "fail"), &out.fail);
        add(DurationOf(*is, "queue"), &out.queue);
        add(DurationOf(*is, "compute_input"), &out.compute_input);
        add(DurationOf(*is, "compute_infer"), &out.compute_infer);
        add(DurationOf(*is, "compute_output"), &out.compute_output);
      }
      if (auto bs = m.find("batch_stats"); bs != m.end() && bs->is_array()) {
        for (const json& b : *bs) {
          if (!b.is_object()) continue;
          add(DurationOf(b, "compute_infer"), &out.batch_compute_infer[U64(b, "batch_size")]);
        }
      }
    }
    return out;
  }

  absl::Status Prepare(const std::vector<InputTensor>& inputs,
                       const std::vector<std::string>& outputs) override {
    ReleaseSharedMemory();
    if (options_.shared_memory == SharedMemoryKind::kSystem) {
      auto shm = ClientSharedMemory::Create(
          inputs, outputs.size(), static_cast<uint64_t>(options_.output_shared_memory_bytes));
      if (!shm.ok()) return shm.status();
      shm_ = *std::move(shm);
      if (absl::Status s = shm_->ForEachRegion([this](const ClientRegion& region) {
            json body = {
                {"key", shm_->key()}, {"offset", region.offset}, {"byte_size", region.byte_size}};
            httplib::Result res = client_.Post(
                absl::StrCat("/v2/systemsharedmemory/region/", region.name, "/register"),
                body.dump(), "application/json");
            if (absl::Status s = CheckResponse(res, "shared memory register"); !s.ok()) return s;
            registered_.push_back(region.name);
            return absl::OkStatus();
          });
          !s.ok()) {
        return s;
      }
    }
    auto shm_params = [](const ClientRegion& region) {
      return json{{"shared_memory_region", region.name},
                  {"shared_memory_byte_size", region.byte_size}};
    };
    json header = json::object();
    json in_list = json::array();
    std::string binary;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const InputTensor& in = inputs[i];
      json params =
          shm_ ? shm_params(shm_->inputs()[i]) : json{{"binary_data_size", in.data.size()}};
      in_list.push_back({{"name", in.name},
                         {"datatype", in.datatype},
                         {"shape", in.shape},
                         {"parameters", std::move(params)}});
      if (!shm_) binary.append(in.data);
    }
    header["inputs"] = std::move(in_list);
    json out_list = json::array();
    for (size_t i = 0; i < outputs.size(); ++i) {
      json params = shm_ ? shm_params(shm_->outputs()[i]) : json{{"binary_data", true}};
      out_list.push_back({{"name", outputs[i]}, {"parameters", std::move(params)}});
    }
    header["outputs"] = std::move(out_list);
    header_ = std::move(header);
    binary_ = std::move(binary);
    Encode();
    return absl::OkStatus();
  }

  void SetSequence(uint64_t id, bool start, bool end) override {
    if (id == 0) {
      header_.erase("parameters");
    } else {
      header_["parameters"] = {
          {"sequence_id", id}, {"sequence_start", start}, {"sequence_end", end}};
    }
    Encode();
  }

  absl::Status Infer() override {
    httplib::Result res = client_.Post(absl::StrCat(model_path_, "/infer"), headers_, body_,
                                       "application/octet-stream");
    return CheckResponse(res, "infer");
  }

 private:
  // Unregisters this client's regions (best effort) and frees its object.
  void ReleaseSharedMemory() {
    for (const std::string& name : registered_) {
      (void)client_.Post(absl::StrCat("/v2/systemsharedmemory/region/", name, "/unregister"), "",
                         "application/json");
    }
    registered_.clear();
    shm_.reset();
  }

  absl::Status CheckResponse(const httplib::Result& res, absl::string_view what) {
    if (!res) {
      return absl::UnavailableError(absl::StrCat(what, ": cannot reach the HTTP server at ",
                                                 options_.url, ": ", ErrorText(res.error())));
    }
    if (res->status == 200) return absl::OkStatus();
    std::string message = res->body;
    absl::string_view part = JsonPart(*res);
    json err = json::parse(part.begin(), part.end(), nullptr, /*allow_exceptions=*/false);
    if (err.is_object() && err.contains("error") && err["error"].is_string()) {
      message = err["error"].get<std::string>();
    }
    return absl::Status(CodeForHttpStatus(res->status),
                        absl::StrCat(what, ": HTTP ", res->status, ": ", message));
  }

  absl::StatusOr<json> GetJson(const std::string& path, absl::string_view what) {
    httplib::Result res = client_.Get(path);
    if (absl::Status s = CheckResponse(res, what); !s.ok()) return s;
    absl::string_view part = JsonPart(*res);
    json doc = json::parse(part.begin(), part.end(), nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) {
      return absl::InternalError(absl::StrCat(what, ": the server's answer is not a JSON object"));
    }
    return doc;
  }

  ClientOptions options_;
  httplib::Client client_;
  std::string model_path_;
  // The request body from header_ and binary_ (the JSON header, then the tensor bytes).
  void Encode() {
    body_ = header_.dump(-1, ' ', false, json::error_handler_t::replace);
    headers_ = {{kHeaderLength, std::to_string(body_.size())}};
    body_.append(binary_);
  }

  json header_;
  std::string binary_;
  httplib::Headers headers_;
  std::string body_;
  std::unique_ptr<ClientSharedMemory> shm_;  // With --shared-memory system, once prepared.
  std::vector<std::string> registered_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<InferClient>> CreateHttpClient(const ClientOptions& options) {
  size_t colon = options.url.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.url.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("-u '", options.url, "' is not HOST:PORT with a port in 1..65535"));
  }
  std::string host = options.url.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "127.0.0.1";
  return std::unique_ptr<InferClient>(new HttpClient(options, std::move(host), port));
}

}  // namespace cuvil::perf
