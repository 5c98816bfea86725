#include "cuvil/observability/exposition.h"

#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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
    absl::StrAppend(out, l.name, "=\"", EscapeLabelValue(l.value), "\"");
  }
  if (!extra_name.empty()) {
    if (!first) out->push_back(',');
    absl::StrAppend(out, extra_name, "=\"", extra_value, "\"");
  }
  out->push_back('}');
}

void AppendSample(std::string* out, std::string_view name, std::string_view suffix,
                  const std::vector<Label>& labels, std::string_view value,
                  std::string_view extra_name = "", std::string_view extra_value = "") {
  absl::StrAppend(out, name, suffix);
  AppendLabels(out, labels, extra_name, extra_value);
  absl::StrAppend(out, " ", value, "\n");
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
    absl::StrAppend(out, "# TYPE ", header_name, " ", type_name, "\n");
    if (!f.unit.empty()) absl::StrAppend(out, "# UNIT ", header_name, " ", f.unit, "\n");
    if (!f.help.empty()) {
      absl::StrAppend(out, "# HELP ", header_name, " ", EscapeHelp(f.help, format), "\n");
    }
  } else {
    absl::StrAppend(out, "# HELP ", header_name, " ", EscapeHelp(f.help, format), "\n");
    absl::StrAppend(out, "# TYPE ", header_name, " ", type_name, "\n");
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
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
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

ExpositionFormat NegotiateFormat(std::string_view accept_header) {
  double om_q = 0;
  double text_q = 0;
  for (std::string_view range : absl::StrSplit(accept_header, ',')) {
    std::vector<std::string_view> parts = absl::StrSplit(range, ';');
    const std::string media = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[0]));
    double q = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      std::string_view param = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&param, "q=") || absl::ConsumePrefix(&param, "Q=")) {
        double parsed;
        if (absl::SimpleAtod(param, &parsed)) q = parsed;
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
  result.content_type = std::string(format == ExpositionFormat::kOpenMetrics
                                        ? kOpenMetricsContentType
                                        : kPrometheusContentType);
  return result;
}

}  // namespace cuvil::observability
