#include "cuvil/observability/exposition.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cuvil/observability/utf8.h"

namespace cuvil::observability {
namespace {

// Value for le / quantile labels. OpenMetrics wants canonical floats ("1.0", not "1").
std::string FormatLabelNumber(double v, ExpositionFormat format) {
  std::string s = FormatValue(v);
  if (format == ExpositionFormat::kOpenMetrics && std::isfinite(v) &&
      s.find_first_of(".eE") == std::string::npos) {
    s += ".0";
  }
  return s;
}

void AppendLabels(std::string* out, const std::vector<Label>& labels, std::string_view extra_name,
                  std::string_view extra_value) {
  if (labels.empty() && extra_name.empty()) return;
  out->push_back('{');
  bool first = true;
  for (const Label& l : labels) {
    if (!first) out->push_back(',');
    first = false;
    out->append(l.name).append("=\"").append(EscapeLabelValue(l.value)).append("\"");
  }
  if (!extra_name.empty()) {
    if (!first) out->push_back(',');
    out->append(extra_name).append("=\"").append(extra_value).append("\"");
  }
  out->push_back('}');
}

void AppendSample(std::string* out, std::string_view name, std::string_view suffix,
                  const std::vector<Label>& labels, std::string_view value,
                  std::string_view extra_name = "", std::string_view extra_value = "") {
  out->append(name).append(suffix);
  AppendLabels(out, labels, extra_name, extra_value);
  out->append(" ").append(value).append("\n");
}

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kSummary:
      return "summary";
    case MetricType::kUnknown:
      break;
  }
  return "unknown";
}

void RenderFamily(std::string* out, const MetricFamilySnapshot& f, ExpositionFormat format) {
  const bool om = format == ExpositionFormat::kOpenMetrics;
  MetricType type = f.type;
  std::string header_name = f.name;
  std::string sample_name = f.name;
  std::string_view counter_suffix;
  if (type == MetricType::kCounter) {
    if (f.counter_total_suffix) {
      counter_suffix = "_total";
      if (!om) header_name += "_total";
    } else if (om) {
      type = MetricType::kUnknown;  // OpenMetrics counters must be sampled as <name>_total
    }
  }
  std::string_view type_name = TypeName(type);
  if (!om && type == MetricType::kUnknown) type_name = "untyped";

  if (om) {
    out->append("# TYPE ").append(header_name).append(" ").append(type_name).append("\n");
    if (!f.unit.empty()) out->append("# UNIT ").append(header_name + " " + f.unit + "\n");
    if (!f.help.empty()) {
      out->append("# HELP ").append(header_name + " " + EscapeHelp(f.help, format) + "\n");
    }
  } else {
    out->append("# HELP ").append(header_name + " " + EscapeHelp(f.help, format) + "\n");
    out->append("# TYPE ").append(header_name).append(" ").append(type_name).append("\n");
  }

  for (const MetricPoint& p : f.points) {
    switch (f.type) {
      case MetricType::kCounter:
        AppendSample(out, sample_name, counter_suffix, p.labels, FormatValue(p.value));
        break;
      case MetricType::kGauge:
      case MetricType::kUnknown:
        AppendSample(out, sample_name, "", p.labels, FormatValue(p.value));
        break;
      case MetricType::kHistogram:
        for (size_t b = 0; b < p.cumulative_counts.size(); ++b) {
          const std::string le = b < p.bucket_bounds.size()
                                     ? FormatLabelNumber(p.bucket_bounds[b], format)
                                     : std::string("+Inf");
          AppendSample(out, sample_name, "_bucket", p.labels, absl::StrCat(p.cumulative_counts[b]),
                       "le", le);
        }
        AppendSample(out, sample_name, "_sum", p.labels, FormatValue(p.sum));
        AppendSample(out, sample_name, "_count", p.labels, absl::StrCat(p.count));
        break;
      case MetricType::kSummary:
        for (const auto& [q, v] : p.quantiles) {
          AppendSample(out, sample_name, "", p.labels, FormatValue(v), "quantile",
                       FormatLabelNumber(q, format));
        }
        AppendSample(out, sample_name, "_sum", p.labels, FormatValue(p.sum));
        AppendSample(out, sample_name, "_count", p.labels, absl::StrCat(p.count));
        break;
    }
  }
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size();) {
    char c = value[i];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else if (size_t len = Utf8SequenceLength(value, i); len > 0) {
      out.append(value.substr(i, len));  // Label values come from clients: keep output UTF-8.
      i += len;
      continue;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for a byte that is not valid UTF-8.
    }
    ++i;
  }
  return out;
}

std::string EscapeHelp(std::string_view help, ExpositionFormat format) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && format == ExpositionFormat::kOpenMetrics) {
      out += "\\\"";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

namespace {
std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits on `sep`, keeping empty pieces.
std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string_view::npos ? s.npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}
}  // namespace

ExpositionFormat NegotiateFormat(std::string_view accept_header) {
  double om_q = 0;
  double text_q = 0;
  for (std::string_view range : Split(accept_header, ',')) {
    const std::vector<std::string_view> parts = Split(range, ';');
    std::string media(Trim(parts[0]));
    for (char& c : media) c = absl::ascii_tolower(static_cast<unsigned char>(c));
    double q = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string_view param = Trim(parts[i]);
      if (param.size() > 2 && (param[0] == 'q' || param[0] == 'Q') && param[1] == '=') {
        const std::string value(param.substr(2));
        char* end = nullptr;
        const double parsed = std::strtod(value.c_str(), &end);
        if (end != value.c_str()) q = parsed;
      }
    }
    if (media == "application/openmetrics-text") {
      om_q = std::max(om_q, q);
    } else if (media == "text/plain" || media == "text/*" || media == "*/*") {
      text_q = std::max(text_q, q);
    }
  }
  return om_q > 0 && om_q >= text_q ? ExpositionFormat::kOpenMetrics
                                    : ExpositionFormat::kPrometheusText;
}

std::string RenderFamilies(const std::vector<MetricFamilySnapshot>& families,
                           ExpositionFormat format) {
  std::string out;
  for (const auto& f : families) RenderFamily(&out, f, format);
  if (format == ExpositionFormat::kOpenMetrics) out += "# EOF\n";
  return out;
}

RenderedMetrics RenderMetrics(const Registry& registry, std::string_view accept_header) {
  const ExpositionFormat format = NegotiateFormat(accept_header);
  RenderedMetrics result;
  result.body = RenderFamilies(registry.Collect(), format);
  result.content_type = std::string(
      format == ExpositionFormat::kOpenMetrics ? kOpenMetricsContentType : kPrometheusContentType);
  return result;
}

}  // namespace cuvil::observability
