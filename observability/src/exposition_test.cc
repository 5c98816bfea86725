#include "cuvil/observability/exposition.h"

#include "gtest/gtest.h"

namespace cuvil::observability {
namespace {

class FixedClock final : public Clock {
 public:
  int64_t NowNanos() const override { return 5'000'000'000'000; }
};

SummaryOptions WithClock(const Clock* clock) {
  SummaryOptions o;
  o.clock = clock;
  return o;
}

void Populate(Registry& r, const Clock* clock) {
  Family<Counter>* c = *r.AddCounter("app_requests", "Requests \\ \"q\"\nnext.", {"path"});
  c->WithLabels({"a\"b\\c\nd"})->Increment(3);
  Family<Gauge>* g = *r.AddGauge("app_temperature_celsius", "Temp.", {}, "celsius");
  g->WithLabels({})->Set(-1.5);
  Family<Histogram>* h =
      *r.AddHistogram("app_latency_seconds", "Latency.", {"m"}, {0.005, 1, 2.5}, "seconds");
  auto hc = h->WithLabels({"x"});
  hc->Observe(0.00390625);
  hc->Observe(0.5);
  hc->Observe(3);
  Family<Summary>* s = *r.AddSummary("app_rt_seconds", "RT.", {}, WithClock(clock), "seconds");
  s->WithLabels({})->Observe(0.25);
  Family<Counter>* t = *r.AddCounter("nv_count", "Triton.", {}, "", /*total_suffix=*/false);
  t->WithLabels({})->Increment(7);
}

TEST(ExpositionTest, PrometheusTextGolden) {
  FixedClock clock;
  Registry r;
  Populate(r, &clock);
  const std::string expected =
      "# HELP app_requests_total Requests \\\\ \"q\"\\nnext.\n"
      "# TYPE app_requests_total counter\n"
      "app_requests_total{path=\"a\\\"b\\\\c\\nd\"} 3\n"
      "# HELP app_temperature_celsius Temp.\n"
      "# TYPE app_temperature_celsius gauge\n"
      "app_temperature_celsius -1.5\n"
      "# HELP app_latency_seconds Latency.\n"
      "# TYPE app_latency_seconds histogram\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"0.005\"} 1\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"1\"} 2\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"2.5\"} 2\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"+Inf\"} 3\n"
      "app_latency_seconds_sum{m=\"x\"} 3.50390625\n"
      "app_latency_seconds_count{m=\"x\"} 3\n"
      "# HELP app_rt_seconds RT.\n"
      "# TYPE app_rt_seconds summary\n"
      "app_rt_seconds{quantile=\"0.5\"} 0.25390625\n"
      "app_rt_seconds{quantile=\"0.9\"} 0.25390625\n"
      "app_rt_seconds{quantile=\"0.99\"} 0.25390625\n"
      "app_rt_seconds_sum 0.25\n"
      "app_rt_seconds_count 1\n"
      "# HELP nv_count Triton.\n"
      "# TYPE nv_count counter\n"
      "nv_count 7\n";
  RenderedMetrics out = RenderMetrics(r, "text/plain");
  EXPECT_EQ(out.body, expected);
  EXPECT_EQ(out.content_type, "text/plain; version=0.0.4; charset=utf-8");
}

TEST(ExpositionTest, OpenMetricsGolden) {
  FixedClock clock;
  Registry r;
  Populate(r, &clock);
  const std::string expected =
      "# TYPE app_requests counter\n"
      "# HELP app_requests Requests \\\\ \\\"q\\\"\\nnext.\n"
      "app_requests_total{path=\"a\\\"b\\\\c\\nd\"} 3\n"
      "# TYPE app_temperature_celsius gauge\n"
      "# UNIT app_temperature_celsius celsius\n"
      "# HELP app_temperature_celsius Temp.\n"
      "app_temperature_celsius -1.5\n"
      "# TYPE app_latency_seconds histogram\n"
      "# UNIT app_latency_seconds seconds\n"
      "# HELP app_latency_seconds Latency.\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"0.005\"} 1\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"1.0\"} 2\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"2.5\"} 2\n"
      "app_latency_seconds_bucket{m=\"x\",le=\"+Inf\"} 3\n"
      "app_latency_seconds_sum{m=\"x\"} 3.50390625\n"
      "app_latency_seconds_count{m=\"x\"} 3\n"
      "# TYPE app_rt_seconds summary\n"
      "# UNIT app_rt_seconds seconds\n"
      "# HELP app_rt_seconds RT.\n"
      "app_rt_seconds{quantile=\"0.5\"} 0.25390625\n"
      "app_rt_seconds{quantile=\"0.9\"} 0.25390625\n"
      "app_rt_seconds{quantile=\"0.99\"} 0.25390625\n"
      "app_rt_seconds_sum 0.25\n"
      "app_rt_seconds_count 1\n"
      "# TYPE nv_count unknown\n"
      "# HELP nv_count Triton.\n"
      "nv_count 7\n"
      "# EOF\n";
  RenderedMetrics out = RenderMetrics(r, "application/openmetrics-text; version=1.0.0");
  EXPECT_EQ(out.body, expected);
  EXPECT_EQ(out.content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
}

TEST(ExpositionTest, EmptySummaryAndSpecialValues) {
  FixedClock clock;
  Registry r;
  SummaryOptions options = WithClock(&clock);
  options.quantiles = {0.5};
  (*r.AddSummary("s", "", {}, options))->WithLabels({});
  (*r.AddGauge("g", "", {"k"}))->WithLabels({"inf"})->Set(INFINITY);
  EXPECT_EQ(RenderFamilies(r.Collect(), ExpositionFormat::kPrometheusText),
            "# HELP s \n# TYPE s summary\ns{quantile=\"0.5\"} NaN\ns_sum 0\ns_count 0\n"
            "# HELP g \n# TYPE g gauge\ng{k=\"inf\"} +Inf\n");
  EXPECT_EQ(RenderFamilies({}, ExpositionFormat::kOpenMetrics), "# EOF\n");
}

TEST(ExpositionTest, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(25e-6), "2.5e-05");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(123456789012.0), "123456789012");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
}

TEST(ExpositionTest, Escaping) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd", ExpositionFormat::kPrometheusText), "a\\\\b\"c\\nd");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd", ExpositionFormat::kOpenMetrics), "a\\\\b\\\"c\\nd");
}

TEST(ExpositionTest, ContentNegotiation) {
  EXPECT_EQ(NegotiateFormat(""), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("*/*"), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("text/plain;version=0.0.4"), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text"), ExpositionFormat::kOpenMetrics);
  // What Prometheus 2.x sends.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=1.0.0,application/"
                            "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,"
                            "*/*;q=0.1"),
            ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;q=0.2, text/plain;q=0.9"),
            ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;q=0"), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("Application/OpenMetrics-Text; version=1.0.0"),
            ExpositionFormat::kOpenMetrics);
  Registry r;
  RenderedMetrics om = RenderMetrics(r, "application/openmetrics-text");
  EXPECT_EQ(om.body, "# EOF\n");
  RenderedMetrics text = RenderMetrics(r, "text/html");
  EXPECT_EQ(text.body, "");
  EXPECT_EQ(text.content_type, kPrometheusContentType);
}

}  // namespace
}  // namespace cuvil::observability
