#include "args.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::perf {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseRangeTest, StartEndStep) {
  absl::StatusOr<Range> r = ParseRange("1:32:4", /*integral=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->start, 1);
  EXPECT_EQ(r->end, 32);
  EXPECT_EQ(r->step, 4);
  EXPECT_THAT(ExpandRange(*r), ElementsAre(1, 5, 9, 13, 17, 21, 25, 29));
}

TEST(ParseRangeTest, DefaultsEndAndStep) {
  absl::StatusOr<Range> single = ParseRange("8", true);
  ASSERT_TRUE(single.ok());
  EXPECT_THAT(ExpandRange(*single), ElementsAre(8));
  absl::StatusOr<Range> two = ParseRange("2:4", true);
  ASSERT_TRUE(two.ok());
  EXPECT_THAT(ExpandRange(*two), ElementsAre(2, 3, 4));
}

TEST(ParseRangeTest, FractionalRatesIncludeTheEnd) {
  absl::StatusOr<Range> r = ParseRange("0.1:0.3:0.1", /*integral=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> levels = ExpandRange(*r);
  ASSERT_EQ(levels.size(), 3u);
  EXPECT_NEAR(levels[2], 0.3, 1e-12);
}

TEST(ParseRangeTest, RejectsBadRanges) {
  EXPECT_FALSE(ParseRange("", true).ok());
  EXPECT_FALSE(ParseRange("0", true).ok());
  EXPECT_FALSE(ParseRange("-1:4", true).ok());
  EXPECT_FALSE(ParseRange("4:1", true).ok());
  EXPECT_FALSE(ParseRange("1:2:3:4", true).ok());
  EXPECT_FALSE(ParseRange("1:x", true).ok());
  EXPECT_FALSE(ParseRange("1.5", /*integral=*/true).ok());
  EXPECT_TRUE(ParseRange("1.5", /*integral=*/false).ok());
  EXPECT_FALSE(ParseRange("1:1000000:1", true).ok());
  EXPECT_FALSE(ParseRange("1:2:0", true).ok());
}

TEST(ParseArgsTest, FullCommandLine) {
  absl::StatusOr<PerfOptions> o = ParseArgs({"-m",
                                             "mlp",
                                             "-x",
                                             "2",
                                             "-u",
                                             "localhost:9001",
                                             "-i",
                                             "http",
                                             "-b",
                                             "8",
                                             "--concurrency-range",
                                             "1:16:2",
                                             "--measurement-interval",
                                             "2000",
                                             "--max-requests",
                                             "500",
                                             "--percentile",
                                             "99.9",
                                             "-f",
                                             "out.csv",
                                             "--input-data",
                                             "random",
                                             "--warmup-requests=5"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->model, "mlp");
  EXPECT_EQ(o->version, "2");
  EXPECT_EQ(o->url, "localhost:9001");
  EXPECT_EQ(o->protocol, Protocol::kHttp);
  EXPECT_EQ(o->batch, 8);
  EXPECT_EQ(o->mode, LoadMode::kConcurrency);
  EXPECT_EQ(o->range.start, 1);
  EXPECT_EQ(o->range.end, 16);
  EXPECT_EQ(o->range.step, 2);
  EXPECT_EQ(o->measurement_interval_ms, 2000);
  EXPECT_EQ(o->max_requests, 500);
  EXPECT_DOUBLE_EQ(o->percentile, 99.9);
  EXPECT_EQ(o->csv_file, "out.csv");
  EXPECT_EQ(o->input_data, InputDataKind::kRandom);
  EXPECT_EQ(o->warmup_requests, 5);
}

TEST(ParseArgsTest, DefaultsFollowTheProtocol) {
  absl::StatusOr<PerfOptions> grpc = ParseArgs({"-m", "m"});
  ASSERT_TRUE(grpc.ok());
  EXPECT_EQ(grpc->url, "127.0.0.1:8001");
  EXPECT_EQ(grpc->mode, LoadMode::kConcurrency);
  EXPECT_THAT(ExpandRange(grpc->range), ElementsAre(1));
  EXPECT_EQ(grpc->measurement_interval_ms, 3000);
  absl::StatusOr<PerfOptions> http = ParseArgs({"-m", "m", "-i", "http"});
  ASSERT_TRUE(http.ok());
  EXPECT_EQ(http->url, "127.0.0.1:8000");
}

TEST(ParseArgsTest, RequestRateAndDirectoryInput) {
  absl::StatusOr<PerfOptions> o =
      ParseArgs({"-m", "m", "--request-rate-range", "50:150:50", "--request-distribution",
                 "poisson", "--max-threads", "4", "--input-data", "/tmp/in"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->mode, LoadMode::kRequestRate);
  EXPECT_THAT(ExpandRange(o->range), ElementsAre(50, 100, 150));
  EXPECT_EQ(o->distribution, Distribution::kPoisson);
  EXPECT_EQ(o->max_threads, 4);
  EXPECT_EQ(o->input_data, InputDataKind::kDirectory);
  EXPECT_EQ(o->input_dir, "/tmp/in");
}

TEST(ParseArgsTest, SharedMemory) {
  absl::StatusOr<PerfOptions> none = ParseArgs({"-m", "m"});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->shared_memory, SharedMemoryKind::kNone);
  EXPECT_EQ(none->output_shared_memory_bytes, 102400);
  absl::StatusOr<PerfOptions> o =
      ParseArgs({"-m", "m", "--shared-memory", "system", "--output-shared-memory-size=4096"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->shared_memory, SharedMemoryKind::kSystem);
  EXPECT_EQ(o->output_shared_memory_bytes, 4096);
}

TEST(ParseArgsTest, SequenceOptions) {
  absl::StatusOr<PerfOptions> d = ParseArgs({"-m", "m"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->sequence_length, 20);  // perf_analyzer's defaults.
  EXPECT_EQ(d->sequence_length_variation, 20);
  EXPECT_EQ(d->sequence_id_start, 1u);
  EXPECT_EQ(d->sequence_id_end, UINT64_MAX);
  EXPECT_EQ(d->num_sequences, 4);
  EXPECT_FALSE(d->sequence_flags);
  absl::StatusOr<PerfOptions> o =
      ParseArgs({"-m", "m", "--sequence-length", "50", "--sequence-length-variation=0",
                 "--sequence-id-range", "100:1099", "--num-of-sequences", "1000"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->sequence_length, 50);
  EXPECT_EQ(o->sequence_length_variation, 0);
  EXPECT_EQ(o->sequence_id_start, 100u);
  EXPECT_EQ(o->sequence_id_end, 1099u);
  EXPECT_EQ(o->num_sequences, 1000);
  EXPECT_TRUE(o->sequence_flags);
  absl::StatusOr<PerfOptions> open_end = ParseArgs({"-m", "m", "--sequence-id-range", "7"});
  ASSERT_TRUE(open_end.ok());
  EXPECT_EQ(open_end->sequence_id_start, 7u);
  EXPECT_EQ(open_end->sequence_id_end, UINT64_MAX);
  EXPECT_EQ(ParseArgs({"-m", "m", "--sequence-count", "9"})->num_sequences, 9);
  for (const char* bad : {"0", "5:4", "1:2:3", "x", "3:"}) {
    absl::StatusOr<PerfOptions> e = ParseArgs({"-m", "m", "--sequence-id-range", bad});
    EXPECT_FALSE(e.ok()) << bad;
  }
  EXPECT_FALSE(ParseArgs({"-m", "m", "--sequence-length-variation", "101"}).ok());
  EXPECT_FALSE(ParseArgs({"-m", "m", "--sequence-length", "0"}).ok());
}

TEST(ParseArgsTest, Help) {
  absl::StatusOr<PerfOptions> o = ParseArgs({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
}

TEST(ParseArgsTest, Errors) {
  auto error = [](std::vector<std::string> args) {
    absl::StatusOr<PerfOptions> o = ParseArgs(args);
    return o.ok() ? std::string("ok") : std::string(o.status().message());
  };
  EXPECT_THAT(error({}), HasSubstr("-m MODEL is required"));
  EXPECT_THAT(error({"-m"}), HasSubstr("-m needs a value"));
  EXPECT_THAT(error({"-m", "x", "--bogus", "1"}), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(error({"-m", "x", "-i", "udp"}), HasSubstr("grpc or http"));
  EXPECT_THAT(error({"-m", "x", "-b", "0"}), HasSubstr("-b"));
  EXPECT_THAT(error({"-m", "x", "-b", "two"}), HasSubstr("-b"));
  EXPECT_THAT(error({"-m", "x", "--concurrency-range", "1", "--request-rate-range", "1"}),
              HasSubstr("mutually exclusive"));
  EXPECT_THAT(error({"-m", "x", "--concurrency-range", "1.5"}), HasSubstr("whole number"));
  EXPECT_THAT(error({"-m", "x", "--percentile", "0"}), HasSubstr("--percentile"));
  EXPECT_THAT(error({"-m", "x", "--percentile", "101"}), HasSubstr("--percentile"));
  EXPECT_THAT(error({"-m", "x", "-u", "http://h:1"}), HasSubstr("without a scheme"));
  EXPECT_THAT(error({"-m", "x", "--measurement-interval", "700000"}), HasSubstr("cap"));
  EXPECT_THAT(error({"-m", "x", "--request-distribution", "uniform"}), HasSubstr("poisson"));
  EXPECT_THAT(error({"-m", "x", "--shared-memory", "cuda"}), HasSubstr("none or system"));
  EXPECT_THAT(error({"-m", "x", "--output-shared-memory-size", "0"}),
              HasSubstr("--output-shared-memory-size"));
}

}  // namespace
}  // namespace cuvil::perf
