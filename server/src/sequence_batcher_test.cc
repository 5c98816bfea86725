// SequenceBatcher on its own (issue 42), without a server: steps of many sequences from many
// threads, executed by a fake model on other threads, racing the admin calls (List, End) and
// checkpoint writes. Built under TSan (scripts/test.sh) so the batcher's locking is checked:
// the server integration tests cannot run under TSan (Debian's gRPC and protobuf are not
// instrumented).
#include "sequence_batcher.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

// An accumulator's config: state_out = state_in + x (4 floats), y = state_out. No model
// parameters: under TSan, protobuf map fields crash (Debian's libprotobuf is built without
// TSan, and its headers lay maps out differently with it), so checkpoints use the default
// cuvil_sequence_checkpoint_every (5).
constexpr char kConfig[] = R"(
name: "acc"
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }
input { name: "START" data_type: TYPE_INT32 dims: [ 1 ] }
input { name: "state_in" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "state_out" data_type: TYPE_FP32 dims: [ 4 ] }
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ] } ]
}
)";

inference::ModelConfig Config() {
  inference::ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kConfig, &config));
  return config;
}

// Executes steps on two threads of its own, in arrival order, like a scheduler would: reads the
// request's x and state_in and answers y = state_out = state_in + x.
class FakeModel {
 public:
  FakeModel() {
    for (int i = 0; i < 2; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~FakeModel() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  SequenceBatcher::RunStep Run() {
    return [this](WireRequest wire, bool, std::function<void(InferenceResponse)> finish) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back({std::move(wire), std::move(finish)});
      }
      cv_.notify_one();
    };
  }

 private:
  struct Job {
    WireRequest wire;
    std::function<void(InferenceResponse)> finish;
  };

  void Work() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      float x[4] = {}, state[4] = {};
      for (const WireInput& in : job.wire.inputs) {
        if (in.name == "x") std::memcpy(x, in.data, sizeof(x));
        if (in.name == "state_in") std::memcpy(state, in.data, sizeof(state));
      }
      HostTensor out(DType::kFloat32, {1, 4});
      for (int i = 0; i < 4; ++i) out.data_as<float>()[i] = state[i] + x[i];
      InferenceResponse r;
      r.outputs.push_back({"y", out});
      r.outputs.push_back({"state_out", out});
      job.finish(std::move(r));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// A step's request: x = `value` in all four elements (the holder keeps the bytes).
WireRequest Step(uint64_t id, float value, bool start, bool end = false) {
  auto data = std::make_shared<std::array<float, 4>>();
  data->fill(value);
  WireRequest w;
  w.sequence.present = true;
  w.sequence.id = id;
  w.sequence.start = start;
  w.sequence.end = end;
  w.inputs.push_back({"x",
                      "FP32",
                      {1, 4},
                      reinterpret_cast<const uint8_t*>(data->data()),
                      sizeof(float) * 4,
                      std::nullopt});
  w.holder = data;
  return w;
}

float Y(const InferenceResponse& r) {
  for (const OutputTensor& o : r.outputs) {
    if (o.name == "y") return o.tensor.data_as<float>()[0];
  }
  return -1;
}

// Waits until `n` answers arrived.
class Answers {
 public:
  std::function<void(InferenceResponse)> Add(std::function<void(const InferenceResponse&)> f) {
    return [this, f = std::move(f)](InferenceResponse r) {
      f(r);
      std::lock_guard<std::mutex> lock(mu_);
      ++count_;
      cv_.notify_all();
    };
  }
  void Wait(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return count_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

TEST(SequenceBatcherTest, ManyThreadsStepManySequencesWhileListingAndEnding) {
  auto batcher = SequenceBatcher::Create(Config());
  ASSERT_TRUE(batcher.ok()) << batcher.status();
  SequenceBatcher& b = **batcher;
  FakeModel model;
  constexpr int kSequences = 8, kSteps = 60;
  Answers answers;
  std::atomic<int> failed{0};
  // Every sequence's steps are queued at once by its own thread (up to the 64 waiting), so they
  // pile up behind each other while the model runs other sequences' steps.
  std::vector<std::thread> clients;
  std::vector<float> last(kSequences, 0);
  for (int s = 0; s < kSequences; ++s) {
    clients.emplace_back([&, s] {
      for (int t = 0; t < kSteps; ++t) {
        b.Step(Step(s + 1, 1.0f, t == 0), model.Run(),
               answers.Add([&, s, t](const InferenceResponse& r) {
                 if (!r.status.ok() || Y(r) != static_cast<float>(t + 1)) ++failed;
                 if (t == kSteps - 1) last[s] = Y(r);
               }));
      }
    });
  }
  // Meanwhile: listings, and a ninth sequence started and ended by the admin call while its
  // steps are queued.
  std::atomic<bool> done{false};
  std::thread admin([&] {
    while (!done) {
      for (const auto& info : b.List()) {
        if (info.steps > kSteps) ++failed;
      }
    }
  });
  Answers ninth;
  std::atomic<int> ninth_ok{0}, ninth_aborted{0};
  for (int t = 0; t < 20; ++t) {
    b.Step(Step(99, 1.0f, t == 0), model.Run(), ninth.Add([&](const InferenceResponse& r) {
      if (r.status.ok()) ++ninth_ok;
      if (absl::IsAborted(r.status)) ++ninth_aborted;
    }));
  }
  int64_t refused = 0;
  absl::StatusOr<uint64_t> ended = b.End(99, "", &refused);
  ASSERT_TRUE(ended.ok()) << ended.status();
  for (auto& t : clients) t.join();
  answers.Wait(kSequences * kSteps);
  ninth.Wait(20);
  done = true;
  admin.join();
  EXPECT_EQ(failed.load(), 0);
  for (int s = 0; s < kSequences; ++s) EXPECT_EQ(last[s], static_cast<float>(kSteps)) << s;
  // End counts the steps it took off the queue; one taken off to start next is refused too.
  EXPECT_GE(ninth_aborted.load(), refused);
  EXPECT_LE(ninth_aborted.load(), refused + 1);
  EXPECT_EQ(ninth_ok.load() + ninth_aborted.load(), 20);
  EXPECT_LE(*ended, static_cast<uint64_t>(ninth_ok.load()));
  // The ended one is gone (not listed, not open); the others are listed with their steps.
  auto list = b.List();
  EXPECT_EQ(list.size(), static_cast<size_t>(kSequences));
  for (const auto& info : list) {
    EXPECT_NE(info.id, 99u);
    EXPECT_EQ(info.steps, static_cast<uint64_t>(kSteps));
    EXPECT_EQ(info.state_bytes, 16);
  }
  int64_t none = 0;
  EXPECT_TRUE(absl::IsNotFound(b.End(99, "", &none).status()));
  Answers after;
  b.Step(Step(99, 1.0f, false), model.Run(), after.Add([](const InferenceResponse& r) {
    EXPECT_THAT(std::string(r.status.message()), HasSubstr("is not open"));
  }));
  after.Wait(1);
}

TEST(SequenceBatcherTest, CheckpointsWrittenFromManyThreadsRestoreEverySequence) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("seq_batcher_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string log = (dir / "acc.v1.seqlog").string();
  constexpr int kSequences = 6, kSteps = 40;
  {
    auto batcher = SequenceBatcher::Create(Config());
    ASSERT_TRUE(batcher.ok());
    ASSERT_TRUE((*batcher)->EnableCheckpoints(log, "model=xxh3:1;code=test").ok());
    FakeModel model;
    Answers answers;
    std::vector<std::thread> clients;
    for (int s = 0; s < kSequences; ++s) {
      clients.emplace_back([&, s] {
        for (int t = 0; t < kSteps; ++t) {
          (*batcher)->Step(Step(s + 1, 2.0f, t == 0), model.Run(),
                           answers.Add([](const InferenceResponse&) {}));
        }
      });
    }
    std::thread lister([&] {
      for (int i = 0; i < 200; ++i) (void)(*batcher)->List();
    });
    for (auto& t : clients) t.join();
    lister.join();
    answers.Wait(kSequences * kSteps);
    int64_t refused = 0;
    ASSERT_TRUE((*batcher)->End(kSequences, "", &refused).ok());  // Tombstoned: not restored.
  }  // Teardown records the steps since each sequence's last checkpoint.
  auto again = SequenceBatcher::Create(Config());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->EnableCheckpoints(log, "model=xxh3:1;code=test").ok());
  auto list = (*again)->List();
  EXPECT_EQ(list.size(), static_cast<size_t>(kSequences - 1));
  for (const auto& info : list) {
    EXPECT_EQ(info.steps, static_cast<uint64_t>(kSteps)) << info.id;
    EXPECT_EQ(info.checkpoint_step, static_cast<uint64_t>(kSteps)) << info.id;
  }
  FakeModel model;
  Answers answers;
  float y = 0;
  (*again)->Step(Step(1, 2.0f, false), model.Run(),
                 answers.Add([&](const InferenceResponse& r) { y = Y(r); }));
  answers.Wait(1);
  EXPECT_EQ(y, 2.0f * (kSteps + 1));  // The running sum resumes exactly.
  again->reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cuvil
