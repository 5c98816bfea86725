// ModelConfig to and from its two text forms: the protobuf text format of config.pbtxt (errors
// name the line, column and field) and the JSON of Triton's config endpoint.
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cuvil/observability/utf8.h"
#include "cuvil/server/model_config.h"
#include "nlohmann/json.hpp"

namespace cuvil {
namespace {

using inference::ModelConfig;

// Keeps the first error only: later ones are usually consequences of it.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(const std::string& text) : text_(text) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!error_.empty()) return;
    std::string description = Describe(line, &column, message);
    error_ = absl::StrCat("config.pbtxt:", line + 1, ":", column + 1, ": ", description);
  }

  const std::string& error() const { return error_; }

 private:
  // Rewrites protobuf's wording into one line that always names the field.
  // Moves `column` to the start of an unknown field's name (protobuf points past it).
  std::string Describe(int line, int* column, const std::string& message) const {
    static constexpr char kNoField[] = "has no field named \"";
    if (size_t at = message.find(kNoField); at != std::string::npos) {
      size_t begin = at + sizeof(kNoField) - 1;
      size_t end = message.find('"', begin);
      std::string field = message.substr(begin, end - begin);
      if (size_t start = LineOffset(line); start != std::string::npos) {
        size_t found = text_.rfind(field, start + std::max(*column, 0));
        if (found != std::string::npos && found >= start) *column = static_cast<int>(found - start);
      }
      // 'Message type "inference.ModelConfig" has ...' -> ModelConfig.
      std::string type;
      if (size_t q = message.find('"'); q != std::string::npos && q < at) {
        type = message.substr(q + 1, message.find('"', q + 1) - q - 1);
        if (size_t dot = type.rfind('.'); dot != std::string::npos) type = type.substr(dot + 1);
      }
      return type.empty() ? absl::StrCat("unknown field \"", field, "\"")
                          : absl::StrCat("unknown field \"", field, "\" in ", type);
    }
    if (absl::StrContains(message, "field")) return message;
    std::string field = FieldBefore(line, *column);
    if (field.empty()) return message;
    return absl::StrCat(message, " (field \"", field, "\")");
  }

  // The last `identifier:` before the error position: the field a bad value belongs to.
  std::string FieldBefore(int line, int column) const {
    size_t offset = LineOffset(line);
    if (offset == std::string::npos) return "";
    size_t end = std::min(text_.size(), offset + static_cast<size_t>(std::max(column, 0)));
    for (size_t colon = text_.rfind(':', end); colon != std::string::npos && colon > 0;
         colon = text_.rfind(':', colon - 1)) {
      size_t e = colon;
      while (e > 0 && (text_[e - 1] == ' ' || text_[e - 1] == '\t')) --e;
      size_t b = e;
      while (b > 0 &&
             (std::isalnum(static_cast<unsigned char>(text_[b - 1])) || text_[b - 1] == '_')) {
        --b;
      }
      if (b < e) return text_.substr(b, e - b);
      if (colon == 0) break;
    }
    return "";
  }

  // Offset of the first character of zero-based `line`, npos past the end.
  size_t LineOffset(int line) const {
    size_t offset = 0;
    for (int l = 0; l < line && offset != std::string::npos; ++l) {
      offset = text_.find('\n', offset);
      if (offset != std::string::npos) ++offset;
    }
    return offset;
  }

  const std::string& text_;
  std::string error_;
};

// proto3 JSON writes 64-bit integers as strings; Triton's config endpoint writes numbers, and
// clients (perf_analyzer, tritonclient) read them as numbers.
void Int64StringsToNumbers(nlohmann::ordered_json& j) {
  static const std::set<std::string> kInt64Fields = {"dims",
                                                     "shape",
                                                     "versions",
                                                     "max_queue_delay_microseconds",
                                                     "priority_levels",
                                                     "default_priority_level",
                                                     "default_timeout_microseconds"};
  auto to_number = [](nlohmann::ordered_json& v) {
    if (!v.is_string()) return;
    const std::string& s = v.get_ref<const std::string&>();
    int64_t i = 0;
    uint64_t u = 0;
    if (absl::SimpleAtoi(s, &i)) {
      v = i;
    } else if (absl::SimpleAtoi(s, &u)) {
      v = u;
    }
  };
  if (j.is_array()) {
    for (auto& e : j) Int64StringsToNumbers(e);
    return;
  }
  if (!j.is_object()) return;
  for (auto& [key, value] : j.items()) {
    if (kInt64Fields.count(key)) {
      if (value.is_array()) {
        for (auto& e : value) to_number(e);
      } else {
        to_number(value);
      }
    } else {
      Int64StringsToNumbers(value);
    }
  }
}

// Path of the first string field (map keys included) that is not valid UTF-8, empty when all
// are. The text format takes byte escapes ("\377") in string fields, but the JSON the config is
// served as, and the protobuf wire form, cannot carry such strings.
std::string InvalidUtf8Field(const google::protobuf::Message& message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const int n = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < n; ++i) {
      if (field->type() == FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& value =
            field->is_repeated()
                ? reflection->GetRepeatedStringReference(message, field, i, &scratch)
                : reflection->GetStringReference(message, field, &scratch);
        for (size_t at = 0; at < value.size();) {
          const size_t len = observability::Utf8SequenceLength(value, at);
          if (len == 0) return std::string(field->name());
          at += len;
        }
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        const google::protobuf::Message& sub =
            field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                 : reflection->GetMessage(message, field);
        std::string inner = InvalidUtf8Field(sub);
        if (!inner.empty()) return absl::StrCat(field->name(), ".", inner);
      }
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfigText(const std::string& text) {
  ModelConfig config;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors(text);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    return absl::InvalidArgumentError(errors.error().empty() ? "config.pbtxt: parse error"
                                                             : errors.error());
  }
  if (std::string field = InvalidUtf8Field(config); !field.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.pbtxt: field '", field, "' is not valid UTF-8"));
  }
  return config;
}

absl::StatusOr<ModelConfig> ParseModelConfigJson(const std::string& json) {
  ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(json, &config, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config JSON: ", std::string(status.message())));
  }
  return config;
}

std::string ModelConfigToJson(const ModelConfig& config) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // Triton prints max_batch_size: 0 and the like.
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(config, &json, options).ok()) return "{}";
  auto parsed = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return json;
  Int64StringsToNumbers(parsed);
  return parsed.dump();
}

}  // namespace cuvil
