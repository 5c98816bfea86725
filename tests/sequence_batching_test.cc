// Issue 42, sequence batching with implicit state: a real server (in process, real HTTP and gRPC
// clients) serving an accumulator whose state the server carries from step to step.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "test_models.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kConfig[] = R"(
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 300000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ] } ]
  oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 2000 }
}
parameters { key: "cuvil_max_sequences" value { string_value: "40" } }
parameters { key: "cuvil_strict_queue_delay" value { string_value: "true" } }
)";

class SequenceBatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    std::string repo = testing::MakeRepository("sequence_batching_repo");
    fs::create_directories(fs::path(repo) / "acc" / "1");
    std::ofstream(fs::path(repo) / "acc" / "1" / "model.onnx", std::ios::binary)
        << testing::AccumulatorModel();
    std::ofstream(fs::path(repo) / "acc" / "config.pbtxt") << kConfig;
    // The same model with a minute's idle limit, for tests whose sequences may wait longer
    // than 300 ms between steps on a loaded machine (sanitizer builds, parallel tests) without
    // meaning to test expiry.
    fs::create_directories(fs::path(repo) / "acc_long" / "1");
    std::ofstream(fs::path(repo) / "acc_long" / "1" / "model.onnx", std::ios::binary)
        << testing::AccumulatorModel();
    std::string long_config = kConfig;
    const std::string idle = "max_sequence_idle_microseconds: 300000";
    long_config.replace(long_config.find(idle), idle.size(),
                        "max_sequence_idle_microseconds: 60000000");
    std::ofstream(fs::path(repo) / "acc_long" / "config.pbtxt") << long_config;
    server_ = testing::StartServer(repo, ServerOptions());
    ASSERT_NE(server_, nullptr);
  }

  // One step over HTTP: x = `value` in all four elements. `id` is a JSON number or string;
  // null leaves sequence_id out.
  httplib::Result Step(httplib::Client& client, const json& id, float value, bool start,
                       bool end = false, json extra_inputs = json::array(),
                       json outputs = nullptr) {
    json params = {{"sequence_start", start}, {"sequence_end", end}};
    if (!id.is_null()) params["sequence_id"] = id;
    json inputs = {{{"name", "x"},
                    {"datatype", "FP32"},
                    {"shape", {1, 4}},
                    {"data", {value, value, value, value}}}};
    for (const json& in : extra_inputs) inputs.push_back(in);
    json body = {{"inputs", inputs}, {"parameters", params}};
    if (!outputs.is_null()) body["outputs"] = outputs;
    return client.Post("/v2/models/" + model_ + "/infer", body.dump(), "application/json");
  }

  // The first element of output `name` in a 200 answer (NaN when absent).
  static float Output(const httplib::Result& res, const std::string& name) {
    if (!res || res->status != 200) return std::nanf("");
    const json doc = json::parse(res->body);
    for (const json& out : doc["outputs"]) {
      if (out["name"] == name) return out["data"][0].get<float>();
    }
    return std::nanf("");
  }

  std::unique_ptr<CuvilServer> server_;
  // The model Step() sends to: "acc" (idle limit 300 ms) or "acc_long" (one minute).
  std::string model_ = "acc";
};

TEST_F(SequenceBatchingTest, StateStaysInTheServerPerSequence) {
  httplib::Client client("127.0.0.1", server_->http_port());
  auto a1 = Step(client, 1, 1.0f, true);
  ASSERT_EQ(a1->status, 200) << a1->body;
  EXPECT_EQ(Output(a1, "y"), 1.0f) << a1->body;
  EXPECT_EQ(Output(a1, "started"), 1.0f);
  // The state output is the server's: not in the answer unless asked for.
  EXPECT_THAT(a1->body, ::testing::Not(HasSubstr("state_out")));
  auto b1 = Step(client, 2, 10.0f, true);
  auto c1 = Step(client, "stream-c", 100.0f, true);
  auto a2 = Step(client, 1, 2.0f, false);
  EXPECT_EQ(Output(b1, "y"), 10.0f);
  EXPECT_EQ(Output(c1, "y"), 100.0f);
  EXPECT_EQ(Output(a2, "y"), 3.0f);
  EXPECT_EQ(Output(a2, "started"), 0.0f);
  auto c2 = Step(client, "stream-c", 5.0f, false, false, json::array(),
                 json::array({{{"name", "state_out"}}}));
  ASSERT_EQ(c2->status, 200) << c2->body;
  EXPECT_EQ(Output(c2, "state_out"), 105.0f);  // Asked for: returned.
  EXPECT_THAT(c2->body, ::testing::Not(HasSubstr("\"y\"")));
  auto b2 = Step(client, 2, 1.0f, false, /*end=*/true);
  EXPECT_EQ(Output(b2, "y"), 11.0f);
  // Ended: the next step must start it again, and then starts from zero.
  auto b3 = Step(client, 2, 1.0f, false);
  EXPECT_EQ(b3->status, 400) << b3->body;
  EXPECT_THAT(b3->body, HasSubstr("is not open"));
  EXPECT_EQ(Output(Step(client, 2, 7.0f, true), "y"), 7.0f);
  // START on an open sequence starts it over.
  EXPECT_EQ(Output(Step(client, 1, 4.0f, true), "y"), 4.0f);
  auto a3 = Step(client, 1, 4.0f, false);
  EXPECT_EQ(Output(a3, "y"), 8.0f);
  EXPECT_EQ(json::parse(a3->body)["parameters"]["sequence_step"], 2);  // Its second step.
  // Open: 1, 2 and "stream-c", each with 16 bytes of state.
  httplib::Client metrics("127.0.0.1", server_->metrics_port());
  auto scrape = metrics.Get("/metrics");
  ASSERT_EQ(scrape->status, 200);
  EXPECT_THAT(scrape->body, HasSubstr("cuvil_sequences_active{model=\"acc\",version=\"1\"} 3"));
  EXPECT_THAT(scrape->body,
              HasSubstr("cuvil_sequence_state_bytes{model=\"acc\",version=\"1\"} 48"));
}

TEST_F(SequenceBatchingTest, BadStepsAreRefusedAndChangeNothing) {
  httplib::Client client("127.0.0.1", server_->http_port());
  ASSERT_EQ(Step(client, 5, 1.0f, true)->status, 200);
  auto no_id = Step(client, nullptr, 1.0f, true);
  EXPECT_EQ(no_id->status, 400);
  EXPECT_THAT(no_id->body, HasSubstr("sequence_id"));
  auto unknown = Step(client, 99, 1.0f, false);
  EXPECT_EQ(unknown->status, 400);
  EXPECT_THAT(unknown->body, HasSubstr("sequence 99"));
  json state = {
      {"name", "state_in"}, {"datatype", "FP32"}, {"shape", {1, 4}}, {"data", {9, 9, 9, 9}}};
  auto forged = Step(client, 5, 1.0f, false, false, json::array({state}));
  EXPECT_EQ(forged->status, 400);
  EXPECT_THAT(forged->body, HasSubstr("the server fills it"));
  auto bad_type =
      client.Post("/v2/models/acc/infer",
                  R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,1,1,1]}],)"
                  R"("parameters":{"sequence_id":5,"sequence_start":"yes"}})",
                  "application/json");
  EXPECT_EQ(bad_type->status, 400);
  auto bad_shape =
      client.Post("/v2/models/acc/infer",
                  R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"data":[1,1,1]}],)"
                  R"("parameters":{"sequence_id":5}})",
                  "application/json");
  EXPECT_EQ(bad_shape->status, 400) << bad_shape->body;
  // A START that fails (a bad shape, found when its turn comes) does not restart the sequence.
  auto bad_start =
      client.Post("/v2/models/acc/infer",
                  R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"data":[1,1,1]}],)"
                  R"("parameters":{"sequence_id":5,"sequence_start":true}})",
                  "application/json");
  EXPECT_EQ(bad_start->status, 400) << bad_start->body;
  // None of that touched sequence 5's state.
  EXPECT_EQ(Output(Step(client, 5, 1.0f, false), "y"), 2.0f);
}

TEST_F(SequenceBatchingTest, ConcurrentStepsOfOneSequenceRunOneAtATime) {
  // 12 steps of one sequence at once: each adds 1, so none may read a state another is about
  // to replace. Meanwhile 8 other sequences step concurrently (batched with each other).
  model_ = "acc_long";
  httplib::Client first("127.0.0.1", server_->http_port());
  ASSERT_EQ(Step(first, 7, 0.0f, true)->status, 200);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 12; ++i) {
    threads.emplace_back([&] {
      httplib::Client c("127.0.0.1", server_->http_port());
      if (Step(c, 7, 1.0f, false)->status != 200) ++failures;
    });
  }
  std::vector<float> finals(8);
  for (int s = 0; s < 8; ++s) {
    threads.emplace_back([&, s] {
      httplib::Client c("127.0.0.1", server_->http_port());
      float y = 0;
      for (int step = 0; step < 20; ++step) {
        auto r = Step(c, 1000 + s, static_cast<float>(s + 1), step == 0, step == 19);
        if (!r || r->status != 200) ++failures;
        y = Output(r, "y");
      }
      finals[s] = y;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Output(Step(first, 7, 0.0f, false), "y"), 12.0f);
  for (int s = 0; s < 8; ++s) EXPECT_EQ(finals[s], 20.0f * (s + 1)) << "sequence " << 1000 + s;
  // Steps of different sequences shared executions (oldest: up to 8 rows; every step waits up to
  // 2 ms for others, cuvil_strict_queue_delay, while 9 clients step at once).
  auto stats = first.Get("/v2/models/acc_long/stats");
  ASSERT_EQ(stats->status, 200);
  const json model = json::parse(stats->body)["model_stats"][0];
  EXPECT_LT(model["execution_count"].get<int64_t>(), model["inference_count"].get<int64_t>())
      << stats->body;
}

TEST_F(SequenceBatchingTest, IdleSequencesExpire) {
  httplib::Client client("127.0.0.1", server_->http_port());
  ASSERT_EQ(Step(client, 3, 1.0f, true)->status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // Idle limit: 300 ms.
  auto late = Step(client, 3, 1.0f, false);
  EXPECT_EQ(late->status, 400);
  EXPECT_THAT(late->body, HasSubstr("idle"));
}

TEST_F(SequenceBatchingTest, TheSequenceLimitHolds) {
  // A minute's idle limit: on a slow machine the first of the 40 STARTs below must not expire
  // (and make room) before the 41st comes.
  model_ = "acc_long";
  httplib::Client client("127.0.0.1", server_->http_port());
  // cuvil_max_sequences is 40: the 41st open sequence is refused, the others still step.
  for (int s = 0; s < 40; ++s) ASSERT_EQ(Step(client, 500 + s, 1.0f, true)->status, 200) << s;
  auto over = Step(client, 600, 1.0f, true);
  EXPECT_NE(over->status, 200);
  EXPECT_EQ(over->status, 503);  // Busy, not "too large": retry once a sequence ends.
  EXPECT_EQ(over->get_header_value("Retry-After"), "1");
  EXPECT_THAT(over->body, HasSubstr("cuvil_max_sequences"));
  EXPECT_EQ(Output(Step(client, 500, 1.0f, false, true), "y"), 2.0f);
  EXPECT_EQ(Step(client, 600, 1.0f, true)->status, 200);  // One ended: room again.
}

TEST_F(SequenceBatchingTest, GrpcClientsSendTritonsSequenceParameters) {
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->grpc_port()), grpc::InsecureChannelCredentials()));
  auto step = [&](uint64_t id, float value, bool start, float* y) {
    inference::ModelInferRequest q;
    q.set_model_name("acc");
    auto* in = q.add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(4);
    for (int i = 0; i < 4; ++i) in->mutable_contents()->add_fp32_contents(value);
    (*q.mutable_parameters())["sequence_id"].set_uint64_param(id);
    (*q.mutable_parameters())["sequence_start"].set_bool_param(start);
    inference::ModelInferResponse r;
    grpc::ClientContext ctx;
    grpc::Status s = stub->ModelInfer(&ctx, q, &r);
    if (s.ok()) {
      for (int o = 0; o < r.outputs_size(); ++o) {
        if (r.outputs(o).name() == "y") {
          std::memcpy(y, r.raw_output_contents(o).data(), sizeof(float));
        }
        EXPECT_NE(r.outputs(o).name(), "state_out");
      }
    }
    return s;
  };
  float y = 0;
  ASSERT_TRUE(step(42, 2.0f, true, &y).ok());
  EXPECT_EQ(y, 2.0f);
  ASSERT_TRUE(step(42, 3.0f, false, &y).ok());
  EXPECT_EQ(y, 5.0f);
  grpc::Status refused = step(43, 1.0f, false, &y);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("is not open"));
  ASSERT_TRUE(step(42, 1.0f, false, &y).ok());
  EXPECT_EQ(y, 6.0f);
  // Steps queued behind a running one start from the scheduler's completion of the step before
  // them: 10 at once over gRPC, none lost.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < 10; ++i) {
    threads.emplace_back([&] {
      float ignored = 0;
      if (!step(42, 1.0f, false, &ignored).ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(step(42, 0.0f, false, &y).ok());
  EXPECT_EQ(y, 16.0f);
}

TEST(SequenceBatchingConfigTest, ControlsAndStatesMustFitTheModel) {
  namespace fs = std::filesystem;
  struct Case {
    const char* batching;
    const char* message;
  };
  const Case cases[] = {
      {R"(control_input [ { name: "NOPE" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ])",
       "control_input 'NOPE' is not a model input"},
      {R"(control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ])",
       "TYPE_FP32 but the model input is TYPE_INT32"},
      {R"(control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } ] } ])",
       "two values"},
      {R"(state [ { input_name: "state_in" output_name: "nope" data_type: TYPE_FP32 dims: [ 4 ] } ])",
       "output_name 'nope' is not a model output"},
      {R"(state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_INT32 dims: [ 4 ] } ])",
       "data_type TYPE_INT32 must match"},
      // initial_state data_file: missing, too short (12 of 16 bytes), leaving its folder.
      {R"(state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ]
                    initial_state { data_type: TYPE_FP32 dims: [ 4 ] data_file: "missing.bin" } } ])",
       "cannot read /"},  // ... the path ends acc/initial_state/missing.bin.
      {R"(state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ]
                    initial_state { data_type: TYPE_FP32 dims: [ 4 ] data_file: "short.bin" } } ])",
       "holds 12 bytes; the state needs 16"},
      {R"(state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ]
                    initial_state { data_type: TYPE_FP32 dims: [ 4 ] data_file: "../config.pbtxt" } } ])",
       "config.pbtxt\\\" must not contain"},
  };
  for (const Case& c : cases) {
    std::string repo = testing::MakeRepository("sequence_batching_bad_repo");
    fs::create_directories(fs::path(repo) / "acc" / "1");
    std::ofstream(fs::path(repo) / "acc" / "1" / "model.onnx", std::ios::binary)
        << testing::AccumulatorModel();
    std::ofstream(fs::path(repo) / "acc" / "config.pbtxt")
        << "max_batch_size: 8\nsequence_batching { " << c.batching << " }\n";
    fs::create_directories(fs::path(repo) / "acc" / "initial_state");
    std::ofstream(fs::path(repo) / "acc" / "initial_state" / "short.bin", std::ios::binary)
        << std::string(12, '\0');
    auto server = testing::StartServer(repo, ServerOptions());
    ASSERT_NE(server, nullptr);
    httplib::Client client("127.0.0.1", server->http_port());
    EXPECT_NE(client.Get("/v2/models/acc/ready")->status, 200) << c.batching;
    auto index = client.Post("/v2/repository/index", "{}", "application/json");
    EXPECT_THAT(index->body, HasSubstr(c.message)) << c.batching;
    // The rest of the repository serves as before.
    EXPECT_EQ(client.Get("/v2/models/mlp/ready")->status, 200);
  }
}

// Triton's initial_state data_file: the state at START read from the model folder's
// initial_state/ (row-major raw values), for every sequence and every restart of one.
TEST(SequenceBatchingConfigTest, InitialStateFromADataFile) {
  namespace fs = std::filesystem;
  std::string repo = testing::MakeRepository("sequence_batching_data_file_repo");
  fs::create_directories(fs::path(repo) / "acc" / "1");
  fs::create_directories(fs::path(repo) / "acc" / "initial_state");
  std::ofstream(fs::path(repo) / "acc" / "1" / "model.onnx", std::ios::binary)
      << testing::AccumulatorModel();
  const float initial[4] = {100.0f, 200.0f, 300.0f, 400.0f};
  std::ofstream(fs::path(repo) / "acc" / "initial_state" / "start.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(initial), sizeof(initial));
  std::ofstream(fs::path(repo) / "acc" / "config.pbtxt") << R"(
max_batch_size: 8
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ]
            initial_state { data_type: TYPE_FP32 dims: [ 4 ] data_file: "start.bin" name: "warm" } } ]
}
)";
  auto server = testing::StartServer(repo, ServerOptions());
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  auto step = [&](int id, float x, bool start) {
    json body = {
        {"inputs",
         {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {1, 4}}, {"data", {x, x, x, x}}}}},
        {"parameters", {{"sequence_id", id}, {"sequence_start", start}}}};
    auto res = client.Post("/v2/models/acc/infer", body.dump(), "application/json");
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body)["outputs"];
  };
  auto y = [](const json& outputs) {
    for (const json& o : outputs) {
      if (o["name"] == "y") return o["data"].get<std::vector<float>>();
    }
    return std::vector<float>();
  };
  EXPECT_EQ(y(step(1, 1.0f, true)), (std::vector<float>{101, 201, 301, 401}));
  EXPECT_EQ(y(step(2, 2.0f, true)), (std::vector<float>{102, 202, 302, 402}));
  EXPECT_EQ(y(step(1, 1.0f, false)), (std::vector<float>{102, 202, 302, 402}));
  // A START on an open sequence begins again from the file's values.
  EXPECT_EQ(y(step(1, 0.0f, true)), (std::vector<float>{100, 200, 300, 400}));
}

}  // namespace
}  // namespace cuvil
