// Dynamic batching end to end: concurrent requests of mixed batch sizes through a batching model
// must each get exactly the rows an unbatched run gives, with no recompilation.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "test_models.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

std::string MakeBatchingRepository() {
  std::string repo = testing::MakeRepository("batching_repo");
  fs::path plain = fs::path(repo) / "mlp_plain";
  fs::create_directories(plain / "1");
  fs::copy_file(fs::path(repo) / "mlp/1/model.onnx", plain / "1/model.onnx");
  std::ofstream(plain / "config.pbtxt") << "max_batch_size: 32\n";
  std::ofstream(fs::path(repo) / "mlp/config.pbtxt")
      << "max_batch_size: 16\n"
         "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
         "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
         // Triton's strict delay, so requests that trickle in one at a time still get merged.
         "parameters { key: \"cuvil_strict_queue_delay\" value { string_value: \"true\" } }\n";
  return repo;
}

std::vector<float> Infer(inference::GRPCInferenceService::Stub* stub, const std::string& model,
                         const std::vector<float>& x, int64_t batch) {
  inference::ModelInferRequest q;
  q.set_model_name(model);
  auto* in = q.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(batch);
  in->add_shape(784);
  q.add_raw_input_contents()->assign(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  grpc::ClientContext ctx;
  inference::ModelInferResponse r;
  grpc::Status s = stub->ModelInfer(&ctx, q, &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  if (!s.ok()) return {};
  EXPECT_EQ(r.outputs(0).shape(0), batch);
  const float* p = reinterpret_cast<const float*>(r.raw_output_contents(0).data());
  return std::vector<float>(p, p + r.raw_output_contents(0).size() / 4);
}

TEST(BatchingTest, MixedBatchSizesMatchUnbatchedResultsWithOneCompile) {
  auto server = testing::StartServer(MakeBatchingRepository());
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  uint64_t compilations_before = TotalCompilations();

  constexpr int kThreads = 12, kPerThread = 10;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0}, rows{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::uniform_real_distribution<float> value(-1, 1);
      for (int i = 0; i < kPerThread; ++i) {
        int64_t batch = 1 + (t + i) % 4;
        std::vector<float> x(batch * 784);
        for (float& v : x) v = value(rng);
        std::vector<float> batched = Infer(stub.get(), "mlp", x, batch);
        std::vector<float> alone = Infer(stub.get(), "mlp_plain", x, batch);
        if (batched.size() != static_cast<size_t>(batch * 10) || batched.size() != alone.size()) {
          ++mismatches;
          continue;
        }
        for (size_t k = 0; k < batched.size(); ++k) {
          if (std::abs(batched[k] - alone[k]) > 1e-5f + 1e-5f * std::abs(alone[k])) {
            ++mismatches;
            break;
          }
        }
        rows += static_cast<int>(batch);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);

  grpc::ClientContext ctx;
  inference::ModelStatisticsRequest sq;
  sq.set_name("mlp");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(stub->ModelStatistics(&ctx, sq, &stats).ok());
  const auto& s = stats.model_stats(0);
  EXPECT_EQ(s.inference_count(), static_cast<uint64_t>(rows.load()));
  EXPECT_EQ(s.inference_stats().success().count(), static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_LT(s.execution_count(), static_cast<uint64_t>(kThreads * kPerThread))
      << "no request was batched";
  EXPECT_GT(s.batch_stats_size(), 1);
  EXPECT_EQ(s.compilation_count(), 1u);
  EXPECT_EQ(TotalCompilations(), compilations_before)
      << "serving a batch size recompiled the model";
}

// A model whose output sizes the data decides (NonZero) serves concurrent requests: each response
// holds exactly the elements its own data selects, and a bad request fails alone.
TEST(BatchingTest, OutputsSizedByTheDataServeConcurrentRequests) {
  std::string repo = testing::MakeRepository("positive_repo");
  fs::path dir = fs::path(repo) / "positive";
  fs::create_directories(dir / "1");
  std::ofstream(dir / "1/model.onnx", std::ios::binary) << testing::PositiveValuesModel(3);
  std::ofstream(dir / "config.pbtxt") << "max_batch_size: 0\n";
  auto server = testing::StartServer(repo);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  auto infer = [&](const std::vector<float>& x, inference::ModelInferResponse* r) {
    inference::ModelInferRequest q;
    q.set_model_name("positive");
    auto* in = q.add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(static_cast<int64_t>(x.size() / 4));
    in->add_shape(4);
    q.add_raw_input_contents()->assign(reinterpret_cast<const char*>(x.data()), x.size() * 4);
    grpc::ClientContext ctx;
    return stub->ModelInfer(&ctx, q, r);
  };
  constexpr int kThreads = 4, kPerThread = 12;
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(200 + t);
      for (int i = 0; i < kPerThread; ++i) {
        std::vector<float> x(12);
        for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);
        std::vector<float> want;
        for (float v : x) {
          if (v > 0) want.push_back(2 * v);
        }
        inference::ModelInferResponse r;
        if (!infer(x, &r).ok() || r.outputs_size() != 2 || r.raw_output_contents_size() != 2) {
          ++failures;
          continue;
        }
        const auto count = static_cast<int64_t>(want.size());
        const std::string& y = r.raw_output_contents(1);
        if (r.outputs(0).shape_size() != 2 || r.outputs(0).shape(0) != count ||
            r.outputs(1).shape_size() != 1 || r.outputs(1).shape(0) != count ||
            r.raw_output_contents(0).size() != static_cast<size_t>(count) * 16 ||
            y.size() != want.size() * 4 || std::memcmp(y.data(), want.data(), y.size()) != 0) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  // A request of the wrong shape fails alone; the model keeps serving.
  inference::ModelInferResponse r;
  EXPECT_EQ(infer(std::vector<float>(8, 1.0f), &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(infer(std::vector<float>(12, 1.0f), &r).ok());
  EXPECT_EQ(r.outputs(1).shape(0), 12);
}

// A text encoder with a free sequence length behind the dynamic batcher: concurrent requests of
// mixed lengths and batch sizes each get what the compiled model gives them alone (requests of
// different lengths are never merged into one execution), from one compile; a length past the
// model's position table fails alone.
TEST(BatchingTest, FreeSequenceLengthsServeMixedUnderConcurrentLoad) {
  std::string repo = testing::MakeRepository("seq_repo");
  fs::path dir = fs::path(repo) / "seq_encoder";
  fs::create_directories(dir / "1");
  fs::copy_file(testing::SourceDir() + "/../shared/models-dynamic/seq_encoder/model.onnx",
                dir / "1/model.onnx");
  std::ofstream(dir / "config.pbtxt")
      << "max_batch_size: 8\n"
         "dynamic_batching { max_queue_delay_microseconds: 3000 }\n";
  auto server = testing::StartServer(repo);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  auto reference = CompileOnnxFile((dir / "1/model.onnx").string());
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto alone = (*engine)->Load("reference/1", *std::move(reference));
  ASSERT_TRUE(alone.ok()) << alone.status();
  const uint64_t compilations_before = TotalCompilations();

  auto infer = [&](const std::vector<int64_t>& ids, int64_t batch, int64_t seq,
                   inference::ModelInferResponse* r) {
    inference::ModelInferRequest q;
    q.set_model_name("seq_encoder");
    auto* in = q.add_inputs();
    in->set_name("ids");
    in->set_datatype("INT64");
    in->add_shape(batch);
    in->add_shape(seq);
    q.add_raw_input_contents()->assign(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
    grpc::ClientContext ctx;
    return stub->ModelInfer(&ctx, q, r);
  };
  constexpr int kThreads = 8, kPerThread = 8;
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < kPerThread; ++i) {
        const int64_t batch = 1 + (t + i) % 2,
                      seq = std::vector<int64_t>{3, 7, 16, 33}[(t + i) % 4];
        HostTensor ids(DType::kInt64, {batch, seq});
        for (int64_t j = 0; j < batch * seq; ++j) ids.data_as<int64_t>()[j] = rng() % 1000;
        std::vector<int64_t> flat(ids.data_as<int64_t>(), ids.data_as<int64_t>() + batch * seq);
        inference::ModelInferResponse r;
        grpc::Status s = infer(flat, batch, seq, &r);
        auto want = (*alone)->Run({ids});
        if (!s.ok() || !want.ok() || r.raw_output_contents_size() != 1) {
          ++failures;
          continue;
        }
        const HostTensor& w = (*want)[0];
        if (r.raw_output_contents(0).size() != w.byte_size() || r.outputs(0).shape(1) != seq) {
          ++mismatches;
          continue;
        }
        const char* got = r.raw_output_contents(0).data();
        for (int64_t k = 0; k < w.num_elements(); ++k) {
          float g;
          std::memcpy(&g, got + k * 4, 4);
          if (std::abs(g - w.data_as<float>()[k]) >
              1e-4f + 1e-4f * std::abs(w.data_as<float>()[k])) {
            ++mismatches;
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(TotalCompilations(), compilations_before) << "a sequence length recompiled the model";

  // Longer than the learned positions: this request fails, the model keeps serving.
  inference::ModelInferResponse r;
  grpc::Status too_long = infer(std::vector<int64_t>(4096, 1), 1, 4096, &r);
  EXPECT_EQ(too_long.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_long.error_message(), ::testing::HasSubstr("slice"));
  EXPECT_TRUE(infer(std::vector<int64_t>(5, 1), 1, 5, &r).ok());
  EXPECT_EQ(r.outputs(0).shape(1), 5);
}

}  // namespace
}  // namespace cuvil
