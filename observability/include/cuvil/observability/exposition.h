// Text exposition of a Registry: Prometheus text format 0.0.4 and OpenMetrics 1.0.0, chosen by
// HTTP content negotiation. Stateless functions; thread-safe as Registry::Collect is.
#ifndef CUVIL_OBSERVABILITY_EXPOSITION_H_
#define CUVIL_OBSERVABILITY_EXPOSITION_H_

#include <string>
#include <string_view>
#include <vector>

#include "cuvil/observability/metrics.h"

namespace cuvil::observability {

enum class ExpositionFormat { kPrometheusText, kOpenMetrics };

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";
inline constexpr std::string_view kOpenMetricsContentType =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

// OpenMetrics when the Accept header lists application/openmetrics-text with q > 0 and a q at
// least that of any text/plain (or wildcard) range; Prometheus text otherwise (also when empty).
ExpositionFormat NegotiateFormat(std::string_view accept_header);

// Renders families in the given format. Prometheus text: counters as <name>_total with HELP/TYPE
// on that name; histograms as _bucket{le} (cumulative, +Inf last), _sum, _count; summaries as
// {quantile}, _sum, _count. OpenMetrics: counter families named without _total in HELP/TYPE/UNIT,
// counters without the _total convention (Triton names) typed "unknown", terminated by "# EOF".
std::string RenderFamilies(const std::vector<MetricFamilySnapshot>& families,
                           ExpositionFormat format);

struct RenderedMetrics {
  std::string body;
  std::string content_type;
};

// Collects `registry` and renders it in the format the Accept header asks for.
RenderedMetrics RenderMetrics(const Registry& registry, std::string_view accept_header);

// Escaping helpers (exposed for tests). Label values escape \, " and newline; HELP escapes \ and
// newline (and " in OpenMetrics).
std::string EscapeLabelValue(std::string_view value);
std::string EscapeHelp(std::string_view help, ExpositionFormat format);
// Shortest round-trip decimal for a sample value; "+Inf", "-Inf", "NaN" for non-finite values.
std::string FormatValue(double v);

}  // namespace cuvil::observability

#endif  // CUVIL_OBSERVABILITY_EXPOSITION_H_
