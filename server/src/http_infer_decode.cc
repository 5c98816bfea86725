#include "http_infer_decode.h"

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "http_json.h"

namespace cuvil::http_request {

using json = nlohmann::json;

absl::StatusOr<int64_t> IntField(const json& object, const char* key, int64_t fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  int64_t v = 0;
  if (it->is_string() && absl::SimpleAtoi(it->get_ref<const std::string&>(), &v)) return v;
  return absl::InvalidArgumentError(absl::StrCat("'", key, "' must be an integer"));
}

absl::StatusOr<bool> BoolField(const json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return absl::InvalidArgumentError(absl::StrCat("'", key, "' must be a bool"));
  return it->get<bool>();
}

absl::StatusOr<std::string> StringField(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("'", key, "' must be a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<json> ParseBody(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
  if (absl::Status s = http_json::CheckJsonNesting(body); !s.ok()) return s;
  try {
    json parsed = json::parse(body.begin(), body.end());
    if (!parsed.is_object())
      return absl::InvalidArgumentError("request body must be a JSON object");
    return parsed;
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON in request body: ", e.what()));
  }
}

absl::StatusOr<size_t> JsonHeaderSize(const std::string* header_value, size_t body_size) {
  if (header_value == nullptr) return body_size;
  uint64_t v = 0;
  if (!absl::SimpleAtoi(*header_value, &v) || v > body_size) {
    return absl::InvalidArgumentError(absl::StrCat(kHeaderLength, " ", *header_value,
                                                   " is not a length within the body of ",
                                                   body_size, " bytes"));
  }
  return static_cast<size_t>(v);
}

absl::StatusOr<std::optional<SharedMemoryRef>> SharedMemoryParams(const json& params,
                                                                  const std::string& tensor) {
  auto it = params.find("shared_memory_region");
  if (it == params.end() || it->is_null()) return std::nullopt;
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "': parameter 'shared_memory_region' must be a non-empty string"));
  }
  SharedMemoryRef ref;
  ref.region = it->get<std::string>();
  absl::StatusOr<int64_t> size = IntField(params, "shared_memory_byte_size", -1);
  absl::StatusOr<int64_t> offset = IntField(params, "shared_memory_offset", 0);
  if (!size.ok()) return size.status();
  if (!offset.ok()) return offset.status();
  if (*size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor,
                     "': 'shared_memory_region' needs a non-negative 'shared_memory_byte_size'"));
  }
  if (*offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor, "': 'shared_memory_offset' must be non-negative"));
  }
  ref.byte_size = static_cast<uint64_t>(*size);
  ref.offset = static_cast<uint64_t>(*offset);
  return ref;
}

absl::StatusOr<DecodedInfer> DecodeInferBody(const json& doc, std::shared_ptr<std::string> body,
                                             size_t json_size) {
  auto payload = std::make_shared<InferPayload>();
  payload->body = body;
  DecodedInfer decoded;
  WireRequest& wire = decoded.wire;
  absl::StatusOr<std::string> id = StringField(doc, "id");
  if (!id.ok()) return id.status();
  wire.id = *id;

  // Request-level parameters.
  bool& binary_output = decoded.binary_output;
  if (auto it = doc.find("parameters"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return absl::InvalidArgumentError("'parameters' must be an object");
    absl::StatusOr<bool> b = BoolField(*it, "binary_data_output", false);
    if (!b.ok()) return b.status();
    binary_output = *b;
    absl::StatusOr<int64_t> priority = IntField(*it, "priority", 0);
    absl::StatusOr<int64_t> timeout = IntField(*it, "timeout", 0);
    if (!priority.ok()) return priority.status();
    if (!timeout.ok()) return timeout.status();
    if (*priority < 0 || *priority > UINT32_MAX || *timeout < 0) {
      return absl::InvalidArgumentError("'priority' and 'timeout' must be non-negative");
    }
    wire.priority = static_cast<uint32_t>(*priority);
    wire.timeout_us = static_cast<uint64_t>(*timeout);
    // Sequence batching: an unsigned or string id, and the step's start and end flags.
    if (auto id_it = it->find("sequence_id"); id_it != it->end()) {
      WireSequence& seq = wire.sequence;
      seq.present = true;
      if (id_it->is_number_unsigned()) {
        seq.id = id_it->get<uint64_t>();
      } else if (id_it->is_number_integer() && id_it->get<int64_t>() >= 0) {
        seq.id = static_cast<uint64_t>(id_it->get<int64_t>());
      } else if (id_it->is_string()) {
        seq.string_id = id_it->get<std::string>();
      } else {
        return absl::InvalidArgumentError(
            "'sequence_id' must be a non-negative integer or a string");
      }
    }
    absl::StatusOr<bool> start = BoolField(*it, "sequence_start", false);
    absl::StatusOr<bool> end = BoolField(*it, "sequence_end", false);
    if (!start.ok()) return start.status();
    if (!end.ok()) return end.status();
    wire.sequence.start = *start;
    wire.sequence.end = *end;
    absl::StatusOr<int64_t> step = IntField(*it, "sequence_step", 0);
    if (!step.ok()) return step.status();
    if (*step < 0) return absl::InvalidArgumentError("'sequence_step' must be non-negative");
    wire.sequence.step = static_cast<uint64_t>(*step);
  }

  // Inputs.
  auto inputs = doc.find("inputs");
  if (inputs == doc.end() || !inputs->is_array()) {
    return absl::InvalidArgumentError("request needs an 'inputs' array");
  }
  const uint8_t* binary = reinterpret_cast<const uint8_t*>(body->data()) + json_size;
  const size_t binary_size = body->size() - json_size;
  size_t binary_used = 0;
  payload->decoded.reserve(inputs->size());
  for (const json& in : *inputs) {
    if (!in.is_object()) return absl::InvalidArgumentError("each input must be a JSON object");
    WireInput wi;
    absl::StatusOr<std::string> in_name = StringField(in, "name");
    if (!in_name.ok()) return in_name.status();
    if (in_name->empty()) return absl::InvalidArgumentError("an input has no 'name'");
    wi.name = *in_name;
    absl::StatusOr<std::string> datatype = StringField(in, "datatype");
    if (!datatype.ok()) return datatype.status();
    if (datatype->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", wi.name, "' has no 'datatype'"));
    }
    wi.datatype = *datatype;
    auto shape = in.find("shape");
    if (shape == in.end() || !shape->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", wi.name, "' needs a 'shape' array"));
    }
    for (const json& d : *shape) {
      if (!d.is_number_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", wi.name, "': shape must hold integers"));
      }
      wi.shape.push_back(d.get<int64_t>());
    }
    absl::StatusOr<int64_t> elements = http_json::ElementCount(wi.shape, wi.name);
    if (!elements.ok()) return elements.status();

    int64_t binary_data_size = -1;
    if (auto params = in.find("parameters"); params != in.end() && !params->is_null()) {
      if (!params->is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", wi.name, "': 'parameters' must be an object"));
      }
      auto shm = SharedMemoryParams(*params, wi.name);
      if (!shm.ok()) return shm.status();
      if (shm->has_value()) {
        if (in.contains("data") || params->contains("binary_data_size")) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input '", wi.name, "' has both shared memory and data or binary_data_size"));
        }
        wi.shared_memory = **std::move(shm);
        wire.inputs.push_back(std::move(wi));
        continue;
      }
      absl::StatusOr<int64_t> size = IntField(*params, "binary_data_size", -1);
      if (!size.ok()) return size.status();
      binary_data_size = *size;
    }
    if (binary_data_size >= 0) {
      if (static_cast<uint64_t>(binary_data_size) > binary_size - binary_used) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", wi.name, "': binary_data_size ", binary_data_size, " exceeds the ",
            binary_size - binary_used, " binary bytes left in the body"));
      }
      wi.data = binary + binary_used;
      wi.byte_size = static_cast<size_t>(binary_data_size);
      binary_used += wi.byte_size;
    } else {
      auto data = in.find("data");
      if (data == in.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", wi.name, "' has neither 'data' nor binary_data_size"));
      }
      std::vector<uint8_t>& bytes = payload->decoded.emplace_back();
      absl::Status s = http_json::DecodeTensorData(*data, wi.datatype, *elements, wi.name, &bytes);
      if (!s.ok()) return s;
      wi.data = bytes.data();
      wi.byte_size = bytes.size();
    }
    wire.inputs.push_back(std::move(wi));
  }
  if (binary_used != binary_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body has ", binary_size, " bytes of binary tensor data but inputs use ", binary_used));
  }

  // Requested outputs.
  std::vector<OutputRequest>& outputs = decoded.outputs;
  if (auto outs = doc.find("outputs"); outs != doc.end() && !outs->is_null()) {
    if (!outs->is_array()) return absl::InvalidArgumentError("'outputs' must be an array");
    for (const json& out : *outs) {
      if (!out.is_object()) return absl::InvalidArgumentError("each output must be a JSON object");
      OutputRequest o;
      absl::StatusOr<std::string> out_name = StringField(out, "name");
      if (!out_name.ok()) return out_name.status();
      if (out_name->empty()) return absl::InvalidArgumentError("an output has no 'name'");
      o.name = *out_name;
      o.binary = binary_output;
      if (auto params = out.find("parameters"); params != out.end() && !params->is_null()) {
        if (!params->is_object()) {
          return absl::InvalidArgumentError(
              absl::StrCat("output '", o.name, "': 'parameters' must be an object"));
        }
        auto shm = SharedMemoryParams(*params, o.name);
        if (!shm.ok()) return shm.status();
        if (shm->has_value()) wire.shared_memory_outputs.push_back({o.name, **std::move(shm)});
        absl::StatusOr<bool> b = BoolField(*params, "binary_data", binary_output);
        if (!b.ok()) return b.status();
        o.binary = *b;
        absl::StatusOr<int64_t> k = IntField(*params, "classification", 0);
        if (!k.ok()) return k.status();
        if (*k < 0) return absl::InvalidArgumentError("'classification' must be positive");
        if (*k > 0 && shm->has_value()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "output '", o.name,
              "': 'classification' cannot be combined with a shared memory output (the region "
              "receives the raw tensor)"));
        }
        o.classification = *k;
      }
      wire.requested_outputs.push_back(o.name);
      outputs.push_back(std::move(o));
    }
  }
  wire.holder = payload;
  return decoded;
}

}  // namespace cuvil::http_request
