// The HTTP/REST front end: KServe v2 routes with Triton's extensions (binary tensors,
// statistics, model configuration, repository); Cuvil's /v2/admin/... routes are answered by
// HttpAdminRoutes (http_admin_routes.cc) after the same browser defences and authorization.
#include "http_service.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cuvil/server/infer_request_builder.h"
#include "cuvil/server/model_config.h"
#include "front_end_security.h"
#include "http_admin_routes.h"
#include "http_connection_reactor.h"
#include "http_infer_decode.h"
#include "http_json.h"
#include "http_response.h"
#include "http_routes.h"
#include "http_stats_json.h"
#include "inflight_budget.h"
#include "load_parameters.h"
#include "model_name.h"
#include "nlohmann/json.hpp"
#include "sequence_batcher.h"
#include "shared_memory_registry.h"

namespace cuvil {
namespace {

using json = nlohmann::json;
using httplib::ContentReader;
using httplib::Request;
using httplib::Response;

using http_request::BoolField;
using http_request::DecodeInferBody;
using http_request::IntField;
using http_request::JsonHeaderSize;
using http_request::kHeaderLength;
using http_request::OutputRequest;
using http_request::ParseBody;
using http_request::StringField;
using http_response::kJson;
using http_response::SetError;
using http_response::SetJson;

// Liveness and readiness answer with the status alone, as Triton does.
bool IsProbePath(const std::string& path) {
  return path.ends_with("/ready") || path.ends_with("/live");
}

std::vector<std::string> SplitPath(const std::string& path) {
  return absl::StrSplit(path, '/', absl::SkipEmpty());
}

json TensorMetadataJson(const std::vector<TensorSpec>& specs, bool batching) {
  json list = json::array();
  for (const TensorSpec& spec : specs) {
    std::vector<int64_t> shape;
    if (batching && spec.batched) shape.push_back(-1);
    shape.insert(shape.end(), spec.dims.begin(), spec.dims.end());
    list.push_back(
        {{"name", spec.name}, {"datatype", DTypeKServeName(spec.dtype)}, {"shape", shape}});
  }
  return list;
}

// The in-flight budget reservation of the request the calling handler thread serves (null
// outside StreamServer::ServeOne). A handler thread serves one request at a time, from its header
// block to its last response byte, and httplib gives handlers no per-request slot of our own, so
// the reservation is the thread's while ServeOne runs: handlers extend it as they learn what the
// request holds, and ServeOne releases it once the response has gone out or the connection
// failed, whichever way the request ended.
thread_local InflightBudget::Reservation* current_reservation = nullptr;

// httplib's request handling (parsing, routing, responses) over a stream the connection reactor
// hands it: httplib's own accept and keep-alive loop hold a thread per connection.
class StreamServer final : public httplib::Server {
 public:
  // Serves one request; true when the connection may carry another. The request's in-flight
  // reservation (current_reservation) lives exactly as long as this call.
  bool ServeOne(httplib::Stream& stream) {
    InflightBudget::Reservation reservation;
    struct Scope {
      explicit Scope(InflightBudget::Reservation* r) { current_reservation = r; }
      ~Scope() { current_reservation = nullptr; }
    } scope(&reservation);
    bool closed = false;
    const bool ok = process_request(stream, /*close_connection=*/false, closed, nullptr);
    return ok && !closed;
  }
};

// Why a request could not reserve its bytes: 503 (retry later) or 413 (larger than the budget).
struct BudgetRefusal {
  int status;
  std::string message;
};

// A body refused for the budget is read and dropped (keeping the connection, and letting clients
// that write their whole body before reading see the answer) up to this size; larger ones are
// not read: the answer goes out and the connection closes (such a client may see a reset).
constexpr uint64_t kDrainRefusedBodyBytes = uint64_t{4} << 20;
// The same for a body refused because the budget is busy (a flood of large bodies must not keep
// the workers reading them).
constexpr uint64_t kDrainBusyBodyBytes = uint64_t{1} << 20;

// The most text one element of `dtype` takes in a JSON response, its comma included: the
// shortest round-trip form (to_chars) of the widest value, e.g. "-1.23456789e-38," for FP32 or
// "-2.2250738585072014e-308," for FP64.
uint64_t MaxJsonElementBytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 16;
    case DType::kFloat64:
      return 25;
    case DType::kInt8:
      return 5;
    case DType::kUInt8:
      return 4;
    case DType::kInt16:
      return 7;
    case DType::kUInt16:
      return 6;
    case DType::kInt32:
      return 12;
    case DType::kUInt32:
      return 11;
    case DType::kInt64:
    case DType::kUInt64:
      return 21;
    case DType::kBool:
      return 6;
    default:
      return 1;  // Written as "[]".
  }
}

// The most one classification entry ("value:index", std::to_string of a double: up to ~330
// characters for the largest values) takes as a std::string, and again in the response body.
constexpr uint64_t kMaxClassificationEntryBytes = 384;
// JSON around one output's data (name, datatype, shape, parameters), and around all of them.
constexpr uint64_t kJsonPerOutputBytes = 512;
constexpr uint64_t kJsonResponseBytes = 1024;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }
uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

// What the response to an HTTP inference holds, estimated from above before it runs.
struct ResponseCost {
  uint64_t json = 0;   // The JSON text (the whole body without binary outputs).
  uint64_t total = 0;  // That, the output tensors, binary outputs and classification entries.
};

// The cost of answering `request` (built for `model`, with the client's `outputs` options and
// `binary_output` default): every requested output's tensor (the scheduler allocates it from
// the shapes ResolveOutputShapes gives), then, unless it goes to shared memory, its bytes again
// in the body when binary, its text when JSON (MaxJsonElementBytes an element), or its
// classification entries. Shapes that cannot be resolved cost nothing: the scheduler then
// fails the request before allocating any output.
ResponseCost EstimateResponse(const ModelVersion& model, const InferenceRequest& request,
                              const std::vector<OutputRequest>& outputs, bool binary_output,
                              const std::vector<SharedMemoryOutput>& shm_outputs, size_t id_bytes) {
  ResponseCost cost;
  // JSON escapes take up to 6 bytes a character ("\u001f").
  cost.json = SaturatingAdd(kJsonResponseBytes, 6 * (model.name().size() + id_bytes));
  absl::StatusOr<std::vector<std::vector<int64_t>>> shapes = ResolveOutputShapes(model, request);
  if (!shapes.ok()) {
    cost.total = cost.json;
    return cost;
  }
  const std::vector<TensorSpec>& specs = model.executable().outputs();
  const bool batching = model.config().max_batch_size() > 0;
  uint64_t other = 0;  // Tensors, binary outputs, classification entries.
  for (size_t o = 0; o < specs.size() && o < shapes->size(); ++o) {
    if (o < request.output_requested.size() && !request.output_requested[o]) continue;
    const TensorSpec& spec = specs[o];
    const std::vector<int64_t>& shape = (*shapes)[o];
    const uint64_t elements = SaturatingTensorBytes(shape, 1);
    other = SaturatingAdd(other, SaturatingMul(elements, DTypeSize(spec.dtype)));
    cost.json =
        SaturatingAdd(cost.json, kJsonPerOutputBytes + 6 * spec.name.size() + 21 * shape.size());
    if (const SharedMemoryOutput* region = FindSharedMemoryOutput(shm_outputs, spec.name)) {
      cost.json = SaturatingAdd(cost.json, 6 * region->ref.region.size());
      continue;
    }
    OutputRequest options{spec.name, binary_output, 0};
    for (const OutputRequest& r : outputs) {
      if (r.name == spec.name) options = r;
    }
    if (options.classification > 0) {
      const uint64_t rows =
          batching && !shape.empty() ? static_cast<uint64_t>(std::max<int64_t>(shape[0], 0)) : 1;
      const uint64_t cols = rows == 0 ? 0 : elements / rows;
      const uint64_t entries =
          SaturatingMul(rows, std::min(cols, static_cast<uint64_t>(options.classification)));
      const uint64_t entry_bytes = SaturatingMul(entries, kMaxClassificationEntryBytes);
      // Each row's values and their order while ranking (16 bytes a column), then the entries.
      other = SaturatingAdd(other, SaturatingAdd(SaturatingMul(cols, 16), entry_bytes));
      if (options.binary) {
        other = SaturatingAdd(other, entry_bytes);
      } else {
        cost.json = SaturatingAdd(cost.json, entry_bytes);
      }
    } else if (options.binary) {
      other = SaturatingAdd(other, SaturatingMul(elements, DTypeSize(spec.dtype)));
    } else {
      cost.json =
          SaturatingAdd(cost.json, SaturatingMul(elements, MaxJsonElementBytes(spec.dtype)));
    }
  }
  cost.total = SaturatingAdd(cost.json, other);
  return cost;
}

void SetRefusal(Response& res, const BudgetRefusal& refusal) {
  SetError(res, refusal.status, refusal.message);
  // The budget frees as requests in flight finish: worth a retry soon, as gRPC clients retry
  // RESOURCE_EXHAUSTED.
  if (refusal.status == 503) res.set_header("Retry-After", "1");
}

class HttpServiceImpl final : public HttpService {
 public:
  HttpServiceImpl(const HttpServiceOptions& options, ModelManager* models, AdminOperations* admin,
                  const ServerInfo* info, SharedMemoryRegistry* shared_memory)
      : options_(options),
        models_(models),
        admin_(admin),
        info_(info),
        shared_memory_(shared_memory),
        admin_routes_(admin) {}

  ~HttpServiceImpl() override { Stop(); }

  absl::Status Start();
  int port() const override { return port_; }
  void Stop() override {
    if (reactor_ != nullptr) reactor_->Stop();
  }

 private:
  // Runs `fn`, turning any exception into a response: nothing escapes into httplib.
  template <typename Fn>
  void Guard(Response& res, Fn&& fn) {
    try {
      fn();
    } catch (const json::exception& e) {
      SetError(res, 400, absl::StrCat("malformed request: ", e.what()));
    } catch (const std::exception& e) {
      SetError(res, 500, absl::StrCat("internal error: ", e.what()));
    } catch (...) {
      SetError(res, 500, "internal error");
    }
  }

  bool ReadBody(const Request& req, Response& res, const ContentReader& reader, std::string* body);
  // Adds `bytes` (what `what` holds) to the current request's in-flight reservation; the refusal
  // when the budget cannot take them (nothing more is then held).
  std::optional<BudgetRefusal> Reserve(uint64_t bytes, const char* what);
  // Refuses `text` nested too deep (400), then reserves what parsing it may take
  // (http_json::ScanJson); false after answering either refusal.
  bool ReserveJson(std::string_view text, Response& res);
  // The checks `policy` asks for (browser defences, then the admin token); false after
  // answering 403, 415 or 401.
  bool Admitted(const Request& req, Response& res, const TrustPolicy& policy);
  bool Authorized(const Request& req, Response& res);
  // Health and readiness answered on the connection thread (see HttpConnectionReactor): the
  // status for GET `path`, or nullopt for any other route.
  std::optional<int> ProbeStatus(std::string_view path);

  void HandleGet(const Request& req, Response& res);
  void HandlePost(const Request& req, Response& res, const ContentReader& reader);
  // Matches the route, applies its class's trust policy and runs its handler.
  void Route(const Request& req, Response& res, std::shared_ptr<std::string> body);

  void ModelMetadata(Response& res, const std::string& name, const std::string& version);
  void ModelStats(Response& res, const std::string& name, const std::string& version);
  void AllStats(Response& res);
  void Infer(const Request& req, Response& res, std::shared_ptr<std::string> body,
             const std::string& name, const std::string& version);
  absl::Status InferInner(const Request& req, Response& res, std::shared_ptr<std::string> body,
                          const std::string& name, const std::string& version);
  // systemsharedmemory[/region/{name}]/(status|register|unregister) for `region` ("" for all).
  void SharedMemoryRoute(Response& res, HttpRouteId id, const std::string& region,
                         const std::string& body);
  void RepositoryIndex(Response& res, const std::string& body);
  void RepositoryLoad(Response& res, const std::string& body, const std::string& name);

  HttpServiceOptions options_;
  ModelManager* models_;
  AdminOperations* admin_;
  const ServerInfo* info_;
  SharedMemoryRegistry* shared_memory_;
  HttpAdminRoutes admin_routes_;
  // httplib parses, routes and answers; the reactor accepts, reads header blocks and waits out
  // keep-alive (plaintext or TLS), so idle and slow clients hold no handler thread.
  std::unique_ptr<StreamServer> server_;
  std::unique_ptr<HttpConnectionReactor> reactor_;
  int port_ = 0;
  bool loopback_bound_ = false;  // Admin routes then answer loopback Host names only.
};

absl::Status HttpServiceImpl::Start() {
  loopback_bound_ = IsLoopbackBindAddress(options_.bind_address);
  server_ = std::make_unique<StreamServer>();
  const size_t threads = static_cast<size_t>(std::max(1, options_.threads));
  // httplib's default of 5 requests per connection would make clients reconnect constantly.
  server_->set_keep_alive_max_count(100000);
  const HttpConnectionLimits& limits = options_.limits;
  // Advertised in the Keep-Alive header; the reactor enforces it.
  server_->set_keep_alive_timeout(std::max<time_t>(1, limits.idle_timeout_ms / 1000));
  server_->set_payload_max_length(static_cast<size_t>(options_.max_request_bytes));
  // httplib reads the body of a PUT, PATCH or DELETE into memory itself before it finds that no
  // route takes it: such requests are refused before their body is read. (It never reads a GET's
  // or HEAD's body: the reactor closes a connection that leaves one unread. A POST's body is read
  // by ReadBody, within the in-flight budget.)
  server_->set_pre_routing_handler([](const Request& req, Response& res) {
    if (req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE" ||
        req.method == "PRI") {
      SetError(
          res, 405,
          absl::StrCat("method ", req.method, " is not allowed: every route takes GET or POST"));
      res.set_header("Allow", "GET, POST");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  server_->Get(".*", [this](const Request& req, Response& res) {
    Guard(res, [&] { HandleGet(req, res); });
  });
  server_->Post(".*", [this](const Request& req, Response& res, const ContentReader& reader) {
    Guard(res, [&] { HandlePost(req, res, reader); });
  });
  // Errors httplib raises itself (bad request line, unknown method, oversized body) get the
  // same {"error": ...} body as ours.
  server_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
        if (!res.body.empty() || IsProbePath(req.path)) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        SetError(res, res.status,
                 res.status == 413
                     ? "request body exceeds the server's limit"
                     : absl::StrCat("HTTP error ", res.status, " for ", req.method, " ", req.path));
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    SetError(res, 500, "internal error");
  });

  HttpTlsFiles tls{options_.tls_cert_file, options_.tls_key_file, options_.tls_client_ca_file};
  StreamServer* stream_server = server_.get();
  absl::StatusOr<std::unique_ptr<HttpConnectionReactor>> reactor = HttpConnectionReactor::Start(
      options_.bind_address, options_.port, limits, static_cast<int>(threads),
      [stream_server](httplib::Stream& stream) { return stream_server->ServeOne(stream); },
      [this](std::string_view path) { return ProbeStatus(path); },
      options_.tls_cert_file.empty() ? nullptr : &tls);
  if (!reactor.ok()) return reactor.status();
  reactor_ = *std::move(reactor);
  port_ = reactor_->port();
  return absl::OkStatus();
}

bool HttpServiceImpl::ReadBody(const Request& req, Response& res, const ContentReader& reader,
                               std::string* body) {
  const size_t max = static_cast<size_t>(options_.max_request_bytes);
  if (req.is_multipart_form_data()) {
    // Drain so the connection stays usable, then refuse.
    reader([](const httplib::MultipartFormData&) { return true; },
           [](const char*, size_t) { return true; });
    SetError(res, 400, "multipart request bodies are not supported");
    return false;
  }
  // The bytes of `*body`'s buffer reserved against the in-flight budget: all of a declared length
  // before any of it is read, a chunked body's as its buffer grows.
  size_t reserved = 0;
  if (req.has_header("Content-Length")) {
    uint64_t length = req.get_header_value<uint64_t>("Content-Length");
    if (length <= max) {
      if (std::optional<BudgetRefusal> refused = Reserve(length, "an HTTP request body")) {
        // A client whose body can never fit gets its 413 even if it writes all of a moderately
        // large body before reading; a busy server (503, a flood) reads less.
        if (length <= (refused->status == 413 ? kDrainRefusedBodyBytes : kDrainBusyBodyBytes)) {
          // Read and drop a small body (nothing is kept) so the answer reaches the client and
          // the connection stays usable for its retry.
          reader([](const char*, size_t) { return true; });
        } else {
          // Reading all of a large refused body would hold a worker for as long as the client
          // takes to send it (a flood of them starved every other request): answer and close.
          res.set_header("Connection", "close");
        }
        SetRefusal(res, *refused);
        return false;
      }
      reserved = static_cast<size_t>(length);
      body->reserve(reserved);
    }
  } else if (!req.has_header("Transfer-Encoding")) {
    // No length and not chunked: HTTP/1.1 says there is no body (`curl -X POST` sends this);
    // httplib would otherwise wait for the connection to close.
    return true;
  }
  bool too_large = false;
  std::optional<BudgetRefusal> refused;
  // Chunked bodies have no Content-Length for httplib to check, so the receiver enforces the cap.
  bool ok = reader([&](const char* data, size_t n) {
    if (body->size() + n > max) {
      too_large = true;
      return false;
    }
    if (body->size() + n > reserved) {
      // Grow the buffer (and its reservation) geometrically, as std::string would.
      const size_t want =
          std::max(body->size() + n, std::min(max, std::max<size_t>(2 * reserved, 64 << 10)));
      refused = Reserve(want - reserved, "an HTTP request body");
      if (refused.has_value()) return false;
      reserved = want;
      body->reserve(reserved);
    }
    body->append(data, n);
    return true;
  });
  if (refused.has_value()) {
    SetRefusal(res, *refused);  // httplib set 400 for the interrupted read.
    return false;
  }
  if (!ok || too_large) {
    if (too_large || res.status == 413) {
      SetError(res, 413,
               absl::StrCat("request body exceeds the limit of ", options_.max_request_bytes,
                            " bytes (max_request_bytes)"));
    } else {
      SetError(res, 400, "could not read the request body");
    }
    return false;
  }
  return true;
}

std::optional<BudgetRefusal> HttpServiceImpl::Reserve(uint64_t bytes, const char* what) {
  InflightBudget* budget = options_.inflight_budget;
  InflightBudget::Reservation* held = current_reservation;
  if (budget == nullptr || held == nullptr || bytes == 0) return std::nullopt;
  absl::Status s = budget->Extend(held, bytes, what);
  if (s.ok()) return std::nullopt;
  const bool alone_too_large =
      budget->limit() != 0 && (bytes > budget->limit() || held->bytes() > budget->limit() - bytes);
  return BudgetRefusal{alone_too_large ? 413 : 503, std::string(s.message())};
}

bool HttpServiceImpl::ReserveJson(std::string_view text, Response& res) {
  // Too deep a body is refused for what it is (400) before anything is reserved for it.
  const http_json::JsonScan scan = http_json::ScanJson(text);
  if (scan.too_deep) {
    SetError(res, http_json::JsonTooDeepError());
    return false;
  }
  std::optional<BudgetRefusal> refused = Reserve(scan.decode_cost, "an HTTP request's parsed JSON");
  if (refused.has_value()) SetRefusal(res, *refused);
  return !refused.has_value();
}

bool HttpServiceImpl::Admitted(const Request& req, Response& res, const TrustPolicy& policy) {
  if (policy.host_and_origin) {
    auto header = [&req](const char* key) -> const std::string* {
      auto it = req.headers.find(key);  // httplib compares header names case-insensitively.
      return it == req.headers.end() ? nullptr : &it->second;
    };
    AdminRouteRequest check;
    check.is_post = policy.json_content_type && req.method == "POST";
    check.host = header("Host");
    check.origin = header("Origin");
    check.content_type = header("Content-Type");
    if (std::optional<RouteRejection> rejected = CheckAdminRoute(check, loopback_bound_)) {
      SetError(res, rejected->http_status, rejected->message);
      return false;
    }
  }
  return !policy.admin_token || Authorized(req, res);
}

std::optional<int> HttpServiceImpl::ProbeStatus(std::string_view path) {
  // Percent-encoded names are decoded by httplib on a handler thread.
  if (path.find('%') != std::string_view::npos) return std::nullopt;
  std::vector<std::string> p =
      absl::StrSplit(absl::string_view(path.data(), path.size()), '/', absl::SkipEmpty());
  if (p.empty() || p[0] != "v2") return std::nullopt;
  p.erase(p.begin());
  std::optional<HttpRouteMatch> match = MatchHttpRoute("GET", p);
  if (!match.has_value()) return std::nullopt;
  switch (match->route->id) {
    case HttpRouteId::kHealthLive:
      return 200;
    case HttpRouteId::kHealthReady:
      return info_->ready.load() ? 200 : 400;
    case HttpRouteId::kModelReady:
      return models_->Get(match->Capture("model"), match->Capture("version")).ok() ? 200 : 400;
    default:
      return std::nullopt;
  }
}

bool HttpServiceImpl::Authorized(const Request& req, Response& res) {
  absl::Status s = admin_->Authorize(req.get_header_value("Authorization"));
  if (s.ok()) return true;
  res.set_header("WWW-Authenticate", "Bearer");
  SetError(res, 401, s.message().empty() ? "unauthorized" : std::string(s.message()));
  return false;
}

void HttpServiceImpl::HandleGet(const Request& req, Response& res) {
  Route(req, res, std::make_shared<std::string>());
}

void HttpServiceImpl::HandlePost(const Request& req, Response& res, const ContentReader& reader) {
  auto body = std::make_shared<std::string>();
  if (!ReadBody(req, res, reader, body.get())) return;
  Route(req, res, std::move(body));
}

void HttpServiceImpl::Route(const Request& req, Response& res, std::shared_ptr<std::string> body) {
  std::vector<std::string> p = SplitPath(req.path);
  if (p.empty() || p[0] != "v2") return SetError(res, 404, "not found: " + req.path);
  p.erase(p.begin());
  std::optional<HttpRouteMatch> match = MatchHttpRoute(req.method, p);
  if (!match.has_value())
    return SetError(res, 404, absl::StrCat("not found: ", req.method, " ", req.path));
  // The one place a route's class turns into checks.
  if (!Admitted(req, res, PolicyFor(match->route->route_class))) return;
  // Every route but inference parses its whole body as JSON (inference reserves for its JSON
  // header alone, see InferInner).
  if (match->route->id != HttpRouteId::kInfer && !body->empty() && !ReserveJson(*body, res)) return;
  const std::string model = match->Capture("model");
  const std::string version = match->Capture("version");
  switch (match->route->id) {
    case HttpRouteId::kServerMetadata:
      return SetJson(res, 200,
                     json{{"name", info_->name},
                          {"version", info_->version},
                          {"extensions", info_->extensions}});
    case HttpRouteId::kHealthLive:
      res.status = 200;
      return;
    case HttpRouteId::kHealthReady:
      res.status = info_->ready.load() ? 200 : 400;
      return;
    case HttpRouteId::kModelReady:
      res.status = models_->Get(model, version).ok() ? 200 : 400;
      return;
    case HttpRouteId::kAllStats:
      return AllStats(res);
    case HttpRouteId::kModelMetadata:
      return ModelMetadata(res, model, version);
    case HttpRouteId::kModelStats:
      return ModelStats(res, model, version);
    case HttpRouteId::kModelConfig: {
      absl::StatusOr<std::shared_ptr<ModelVersion>> got = models_->Get(model, version);
      if (!got.ok()) return SetError(res, got.status());
      return SetJson(res, 200, ModelConfigToJson((*got)->config()));
    }
    case HttpRouteId::kInfer:
      return Infer(req, res, std::move(body), model, version);
    case HttpRouteId::kSharedMemoryStatus:
    case HttpRouteId::kSharedMemoryRegister:
    case HttpRouteId::kSharedMemoryUnregister:
      return SharedMemoryRoute(res, match->route->id, match->Capture("region"), *body);
    case HttpRouteId::kCudaSharedMemory:
      return SetError(res, 501, "CUDA shared memory is not supported: this server runs on the CPU");
    case HttpRouteId::kRepositoryIndex:
      return RepositoryIndex(res, *body);
    case HttpRouteId::kRepositoryLoad:
      return RepositoryLoad(res, *body, model);
    case HttpRouteId::kRepositoryUnload: {
      absl::StatusOr<json> parsed = ParseBody(*body);
      if (!parsed.ok()) return SetError(res, parsed.status());
      if (absl::Status s = ValidateModelName(model); !s.ok()) return SetError(res, s);
      absl::Status s = models_->Unload(model);
      if (!s.ok()) return SetError(res, s);
      res.status = 200;
      return;
    }
    case HttpRouteId::kAdminGet:
      if (admin_routes_.HandleGet(p, res)) return;
      break;
    case HttpRouteId::kAdminPost:
      if (admin_routes_.HandlePost(p, *body, res)) return;
      break;
  }
  SetError(res, 404, absl::StrCat("not found: ", req.method, " ", req.path));
}

void HttpServiceImpl::ModelMetadata(Response& res, const std::string& name,
                                    const std::string& version) {
  absl::StatusOr<std::shared_ptr<ModelVersion>> got = models_->Get(name, version);
  if (!got.ok()) return SetError(res, got.status());
  const ModelVersion& model = **got;
  json versions = json::array();
  for (const VersionStatus& v : models_->Versions(name)) {
    if (v.state == ModelState::kReady) versions.push_back(std::to_string(v.version));
  }
  const inference::ModelConfig& config = model.config();
  const bool batching = config.max_batch_size() > 0;
  SetJson(res, 200,
          json{{"name", model.name()},
               {"versions", std::move(versions)},
               {"platform", config.platform().empty() ? "onnxruntime_onnx" : config.platform()},
               {"inputs", TensorMetadataJson(model.executable().inputs(), batching)},
               {"outputs", TensorMetadataJson(model.executable().outputs(), batching)}});
}

void HttpServiceImpl::ModelStats(Response& res, const std::string& name,
                                 const std::string& version) {
  json list = json::array();
  if (version.empty()) {
    // Every ready version, as Triton reports a model without a version.
    for (const VersionStatus& v : models_->Versions(name)) {
      if (v.model) list.push_back(StatsJson(*v.model));
    }
    if (auto rejected = models_->Rejections(); !name.empty() && rejected.count(name)) {
      list.push_back(RejectedStatsJson(name, rejected[name]));
    }
  }
  if (list.empty()) {
    absl::StatusOr<std::shared_ptr<ModelVersion>> model = models_->Get(name, version);
    if (!model.ok()) return SetError(res, model.status());
    list.push_back(StatsJson(**model));
  }
  SetJson(res, 200, json{{"model_stats", std::move(list)}});
}

void HttpServiceImpl::AllStats(Response& res) {
  json list = json::array();
  for (const VersionStatus& v : models_->Index()) {
    if (v.model) list.push_back(StatsJson(*v.model));
  }
  for (const auto& [name, reasons] : models_->Rejections()) {
    // "" gathers names never loaded: metrics show it, a statistics entry would not.
    if (!name.empty()) list.push_back(RejectedStatsJson(name, reasons));
  }
  SetJson(res, 200, json{{"model_stats", std::move(list)}});
}

void HttpServiceImpl::Infer(const Request& req, Response& res, std::shared_ptr<std::string> body,
                            const std::string& name, const std::string& version) {
  absl::Status s = InferInner(req, res, std::move(body), name, version);
  if (!s.ok()) SetError(res, s);
}

absl::Status HttpServiceImpl::InferInner(const Request& req, Response& res,
                                         std::shared_ptr<std::string> body, const std::string& name,
                                         const std::string& version) {
  // The JSON header, then (binary tensor extension) the raw tensor bytes.
  std::string header_value;
  if (req.has_header(kHeaderLength)) header_value = req.get_header_value(kHeaderLength);
  absl::StatusOr<size_t> header_size =
      JsonHeaderSize(req.has_header(kHeaderLength) ? &header_value : nullptr, body->size());
  if (!header_size.ok()) return header_size.status();
  const size_t json_size = *header_size;
  // The parsed header and the tensors decoded from its "data" may take many times its bytes.
  if (!ReserveJson(std::string_view(*body).substr(0, json_size), res)) return absl::OkStatus();
  absl::StatusOr<json> parsed = ParseBody(std::string_view(*body).substr(0, json_size));
  if (!parsed.ok()) return parsed.status();
  const json& doc = *parsed;

  absl::StatusOr<std::shared_ptr<ModelVersion>> got = models_->Route(name, version);
  if (!got.ok()) return got.status();
  ModelVersion& model = **got;

  absl::StatusOr<http_request::DecodedInfer> decoded = DecodeInferBody(doc, body, json_size);
  if (!decoded.ok()) return decoded.status();
  // Reading or writing a region gets the shared-memory routes' browser defences.
  bool names_region = !decoded->wire.shared_memory_outputs.empty();
  for (const WireInput& in : decoded->wire.inputs) names_region |= in.shared_memory.has_value();
  if (names_region && !Admitted(req, res, SharedMemoryInferencePolicy())) return absl::OkStatus();
  const bool binary_output = decoded->binary_output;
  const std::vector<OutputRequest>& outputs = decoded->outputs;
  const std::string id = decoded->wire.id;
  constexpr const char* kWhat = "an HTTP inference with its response";
  // Inputs copied out of shared memory or realigned: reserved before they are copied.
  if (std::optional<BudgetRefusal> refused = Reserve(CopiedInputBytes(decoded->wire), kWhat)) {
    SetRefusal(res, *refused);
    return absl::OkStatus();
  }
  std::vector<SharedMemoryOutput> shm_outputs;
  ResponseCost cost{};
  std::optional<BudgetRefusal> refused;
  const bool budgeted =
      options_.inflight_budget != nullptr && options_.inflight_budget->limit() != 0;
  // Builds and runs the request on this thread (for a sequence model, once its turn has come and
  // its control and state inputs are added).
  auto execute = [&](WireRequest wire) {
    InferenceResponse response;
    absl::StatusOr<std::unique_ptr<InferenceRequest>> request =
        BuildInferenceRequest(model, std::move(wire), shared_memory_, &shm_outputs);
    if (!request.ok()) {
      response.status = request.status();
      return response;
    }
    // What the response holds — the output tensors the scheduler allocates, and the body they
    // are encoded into — is reserved before the request runs (an unlimited budget counts
    // nothing: the estimate may be far above what is written).
    cost = EstimateResponse(model, **request, outputs, binary_output, shm_outputs, id.size());
    refused = budgeted ? Reserve(cost.total, kWhat) : std::nullopt;
    if (refused.has_value()) {
      response.status = absl::ResourceExhaustedError(refused->message);
      return response;
    }
    // This thread writes the answer: a request that may never finish (a Loop, or patched code)
    // runs on a scheduler worker, so that it is still answered (UNAVAILABLE) when its version is
    // retired. Others may run here, sparing the hand-off.
    (*request)->may_run_inline = !model.MayRunUnbounded();
    return InferBlocking(model, *std::move(request));
  };
  InferenceResponse response = model.sequences() != nullptr ? model.sequences()->StepBlocking(
                                                                  std::move(decoded->wire), execute)
                                                            : execute(std::move(decoded->wire));
  if (refused.has_value()) {
    SetRefusal(res, *refused);
    return absl::OkStatus();
  }
  if (!response.status.ok()) return response.status;
  if (absl::Status s = WriteSharedMemoryOutputs(shm_outputs, response); !s.ok()) return s;

  // Encode: JSON header, then the binary outputs in order. The JSON's reserved size (within the
  // budget) bounds its text, so it never regrows, and the binary outputs are appended once,
  // straight from their tensors.
  std::string out;
  if (budgeted) out.reserve(static_cast<size_t>(cost.json));
  std::deque<std::string> encoded_classes;  // Binary classification outputs, kept for `binary`.
  std::vector<std::string_view> binary;     // The binary outputs' bytes, in order.
  uint64_t binary_bytes = 0;
  out.append("{\"model_name\":");
  http_json::AppendJsonString(model.name(), &out);
  absl::StrAppend(&out, ",\"model_version\":\"", model.version(), "\"");
  if (!id.empty()) {
    out.append(",\"id\":");
    http_json::AppendJsonString(id, &out);
  }
  if (response.sequence_step > 0) {
    absl::StrAppend(&out, ",\"parameters\":{\"sequence_step\":", response.sequence_step, "}");
  }
  out.append(",\"outputs\":[");
  const bool batching = model.config().max_batch_size() > 0;
  bool any_binary = false;
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    const OutputTensor& t = response.outputs[i];
    OutputRequest options{t.name, binary_output, 0};
    for (const OutputRequest& o : outputs) {
      if (o.name == t.name) options = o;
    }
    if (i) out.push_back(',');
    out.append("{\"name\":");
    http_json::AppendJsonString(t.name, &out);

    const std::vector<int64_t>& shape = t.tensor.shape();
    std::vector<int64_t> out_shape = shape;
    std::vector<std::string> classes;
    if (options.classification > 0) {
      int64_t rows = batching && !shape.empty() ? shape[0] : 1;
      int64_t cols = rows == 0 ? 0 : t.tensor.num_elements() / rows;
      int64_t k = std::min(options.classification, cols);
      classes = http_json::Classify(t.tensor.dtype(), t.tensor.data(), rows, cols, k);
      out_shape =
          batching && !shape.empty() ? std::vector<int64_t>{rows, k} : std::vector<int64_t>{k};
    }
    const char* datatype = options.classification > 0 ? "BYTES" : DTypeKServeName(t.tensor.dtype());
    absl::StrAppend(&out, ",\"datatype\":\"", datatype, "\",\"shape\":[");
    for (size_t d = 0; d < out_shape.size(); ++d) {
      absl::StrAppend(&out, d ? "," : "", out_shape[d]);
    }
    out.push_back(']');
    if (const SharedMemoryOutput* o = FindSharedMemoryOutput(shm_outputs, t.name)) {
      // Written into the region: the response carries its parameters and no data.
      out.append(",\"parameters\":{\"shared_memory_region\":");
      http_json::AppendJsonString(o->ref.region, &out);
      absl::StrAppend(&out, ",\"shared_memory_byte_size\":", t.tensor.byte_size());
      if (o->ref.offset != 0) absl::StrAppend(&out, ",\"shared_memory_offset\":", o->ref.offset);
      out.append("}}");
      continue;
    } else if (options.binary) {
      any_binary = true;
      if (options.classification > 0) {
        http_json::AppendBytesElements(classes, &encoded_classes.emplace_back());
        binary.push_back(encoded_classes.back());
      } else {
        binary.emplace_back(reinterpret_cast<const char*>(t.tensor.data()), t.tensor.byte_size());
      }
      binary_bytes += binary.back().size();
      absl::StrAppend(&out, ",\"parameters\":{\"binary_data_size\":", binary.back().size(), "}");
    } else if (options.classification > 0) {
      out.append(",\"data\":[");
      for (size_t c = 0; c < classes.size(); ++c) {
        if (c) out.push_back(',');
        http_json::AppendJsonString(classes[c], &out);
      }
      out.push_back(']');
    } else {
      out.append(",\"data\":");
      http_json::AppendJsonArray(t.tensor.dtype(), t.tensor.data(), t.tensor.num_elements(), &out);
    }
    out.push_back('}');
  }
  out.append("]}");

  res.status = 200;
  if (!any_binary) {
    res.body = std::move(out);
    res.set_header("Content-Type", kJson);
  } else {
    res.set_header(kHeaderLength, std::to_string(out.size()));
    out.reserve(out.size() + binary_bytes);
    for (std::string_view bytes : binary) out.append(bytes);
    res.body = std::move(out);
    res.set_header("Content-Type", "application/octet-stream");
  }
  return absl::OkStatus();
}

void HttpServiceImpl::SharedMemoryRoute(Response& res, HttpRouteId id, const std::string& name,
                                        const std::string& body) {
  if (id == HttpRouteId::kSharedMemoryStatus) {
    auto regions = shared_memory_->Status(name);
    if (!regions.ok()) return SetError(res, regions.status());
    json list = json::array();
    for (const SharedMemoryRegionStatus& r : *regions) {
      list.push_back(
          {{"name", r.name}, {"key", r.key}, {"offset", r.offset}, {"byte_size", r.byte_size}});
    }
    return SetJson(res, 200, list);
  }
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  if (id == HttpRouteId::kSharedMemoryUnregister) {
    shared_memory_->Unregister(name);
    res.status = 200;
    return;
  }
  absl::StatusOr<std::string> key = StringField(*parsed, "key");
  absl::StatusOr<int64_t> offset = IntField(*parsed, "offset", 0);
  absl::StatusOr<int64_t> byte_size = IntField(*parsed, "byte_size", -1);
  absl::Status s = !key.ok()         ? key.status()
                   : !offset.ok()    ? offset.status()
                   : !byte_size.ok() ? byte_size.status()
                                     : absl::OkStatus();
  if (s.ok() && (*offset < 0 || *byte_size < 0)) {
    s = absl::InvalidArgumentError(
        "register needs a 'key', a non-negative 'byte_size' and optionally a non-negative "
        "'offset'");
  }
  if (s.ok()) {
    s = shared_memory_->Register(name, *key, static_cast<uint64_t>(*offset),
                                 static_cast<uint64_t>(*byte_size));
  }
  if (!s.ok()) return SetError(res, s);
  res.status = 200;
}

void HttpServiceImpl::RepositoryIndex(Response& res, const std::string& body) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  absl::StatusOr<bool> ready_only = BoolField(*parsed, "ready", false);
  if (!ready_only.ok()) return SetError(res, ready_only.status());
  json list = json::array();
  for (const VersionStatus& v : models_->Index()) {
    if (*ready_only && v.state != ModelState::kReady) continue;
    list.push_back({{"name", v.name},
                    {"version", v.version > 0 ? std::to_string(v.version) : ""},
                    {"state", ModelStateName(v.state)},
                    {"reason", v.reason}});
  }
  SetJson(res, 200, list);
}

void HttpServiceImpl::RepositoryLoad(Response& res, const std::string& body,
                                     const std::string& name) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  LoadParametersInput input;
  input.model_name = name;
  std::string config_text;  // A config sent as a JSON object, as text; outlives the parse.
  if (auto params = parsed->find("parameters"); params != parsed->end() && !params->is_null()) {
    if (!params->is_object()) return SetError(res, 400, "'parameters' must be an object");
    input.parameters.reserve(params->size());
    for (const auto& [key, value] : params->items()) {
      LoadParameter& p = input.parameters.emplace_back();
      p.key = key;
      if (value.is_string()) {
        p.type = LoadParameter::Type::kString;  // Files arrive as base64 text over HTTP.
        p.value = value.get_ref<const std::string&>();
      } else if (key == "config" && value.is_object()) {
        // tritonclient sends the config as a JSON string; accept the object itself too.
        config_text = value.dump();
        p.type = LoadParameter::Type::kString;
        p.value = config_text;
      }
    }
  }
  absl::StatusOr<LoadRequest> load = ParseLoadParameters(input);
  if (!load.ok()) return SetError(res, load.status());
  absl::Status s = models_->Load(*load);
  if (!s.ok()) return SetError(res, s);
  res.status = 200;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpService>> HttpService::Start(
    const HttpServiceOptions& options, ModelManager* models, AdminOperations* admin,
    const ServerInfo* info, SharedMemoryRegistry* shared_memory) {
  auto service = std::make_unique<HttpServiceImpl>(options, models, admin, info, shared_memory);
  absl::Status s = service->Start();
  if (!s.ok()) return s;
  return std::unique_ptr<HttpService>(std::move(service));
}

}  // namespace cuvil
