#include "sequence_log.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

constexpr char kIdentity[] = "states;s>t:TYPE_FP32[1,4]";

SequenceRecord StateRecord(const std::string& key, uint64_t steps, float value) {
  auto t = std::make_shared<HostTensor>(DType::kFloat32, std::vector<int64_t>{1, 4});
  for (int i = 0; i < 4; ++i) t->data_as<float>()[i] = value + static_cast<float>(i);
  return {key, false, steps, {t}};
}

float First(const SequenceRecord& r) { return r.state.at(0)->data_as<float>()[0]; }

TEST(SequenceLogTest, RecordsRoundTrip) {
  std::vector<SequenceRecord> in = {
      StateRecord("n1", 5, 1.5f), {"n2", true, 9, {}}, StateRecord("sabc", 10, -2.0f)};
  std::vector<std::string> warnings;
  auto out = SequenceLog::Decode(SequenceLog::Encode(kIdentity, in), kIdentity, &warnings);
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].key, "n1");
  EXPECT_EQ(out[0].steps, 5u);
  EXPECT_EQ(First(out[0]), 1.5f);
  EXPECT_EQ(out[0].state[0]->shape(), (std::vector<int64_t>{1, 4}));
  EXPECT_TRUE(out[1].ended);
  EXPECT_EQ(First(out[2]), -2.0f);
}

TEST(SequenceLogTest, DamagedAndTornRecordsAreSkippedNotRead) {
  std::string file = SequenceLog::Encode(
      kIdentity,
      {StateRecord("n1", 5, 1.0f), StateRecord("n2", 5, 2.0f), StateRecord("n3", 5, 3.0f)});
  const size_t header = SequenceLog::Encode(kIdentity, {}).size();
  const size_t record = (file.size() - header) / 3;
  file[header + record + 30] ^= 0x40;  // A bit flipped inside the second record's payload.
  file.resize(file.size() - 7);        // The third record torn by a kill.
  std::vector<std::string> warnings;
  auto out = SequenceLog::Decode(file, kIdentity, &warnings);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, "n1");
  ASSERT_EQ(warnings.size(), 1u);  // One damaged stretch: from the second record to the end.
  EXPECT_THAT(warnings[0], HasSubstr("damaged bytes"));
  // A good record after a damaged one is found again.
  std::string healed = file.substr(0, header + 2 * record) +
                       SequenceLog::Encode(kIdentity, {StateRecord("n4", 6, 4.0f)}).substr(header);
  warnings.clear();
  out = SequenceLog::Decode(healed, kIdentity, &warnings);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].key, "n4");
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(SequenceLogTest, AnotherIdentityDropsEverything) {
  std::vector<std::string> warnings;
  auto out = SequenceLog::Decode(SequenceLog::Encode("states;other", {StateRecord("n1", 1, 1)}),
                                 kIdentity, &warnings);
  EXPECT_TRUE(out.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("other model states"));
}

// Checkpoints carry the model's build identity: a log of another model file or another build
// of the code generator is dropped whole, the warning saying which.
TEST(SequenceLogTest, AnotherBuildDropsEverythingAndSaysWhy) {
  const std::string states = "s>t:TYPE_FP32[1,4]";
  const std::string mine = SequenceLog::Identity(states, "model=xxh3:aa;code=build-1");
  auto decode = [&](const std::string& identity, std::vector<std::string>* warnings) {
    return SequenceLog::Decode(SequenceLog::Encode(identity, {StateRecord("n1", 1, 1)}), mine,
                               warnings);
  };
  std::vector<std::string> warnings;
  EXPECT_EQ(decode(mine, &warnings).size(), 1u);
  EXPECT_TRUE(warnings.empty());
  struct Case {
    std::string identity;
    const char* why;
  };
  const Case cases[] = {
      {SequenceLog::Identity(states, "model=xxh3:bb;code=build-1"),
       "written for another model file (ONNX digest xxh3:bb; this build's is xxh3:aa)"},
      {SequenceLog::Identity(states, "model=xxh3:aa;code=build-0"),
       "written by another build of the model (code build-0; this build's is build-1)"},
      {SequenceLog::Identity("s>t:TYPE_FP32[1,8]", "model=xxh3:aa;code=build-1"),
       "other model states"},
      // The first format: the same states, no build identity.
      {kIdentity, "did not record the model's build identity"},
      {"states;s>t:TYPE_FP32[1,2]", "other model states"},
      {SequenceLog::Identity(states, ""), "did not record the model's build identity"},
  };
  for (const Case& c : cases) {
    warnings.clear();
    EXPECT_TRUE(decode(c.identity, &warnings).empty()) << c.identity;
    ASSERT_EQ(warnings.size(), 1u) << c.identity;
    EXPECT_THAT(warnings[0], HasSubstr(c.why)) << c.identity;
    EXPECT_THAT(warnings[0], HasSubstr("every sequence in it dropped"));
  }
  // A header whose identity does not check is reported as damaged.
  std::string file = SequenceLog::Encode(mine, {});
  file[12] ^= 1;
  warnings.clear();
  EXPECT_TRUE(SequenceLog::Decode(file, mine, &warnings).empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("header is damaged"));
}

// A header after the magic that is not this identity's is parsed to say why: whatever its
// bytes (lengths past the end, truncation, garbage), the log is dropped with one warning.
TEST(SequenceLogTest, ArbitraryHeadersAreDroppedWithOneWarning) {
  const std::string mine = SequenceLog::Identity("s>t:TYPE_FP32[1,4]", "model=xxh3:aa;code=c");
  const std::string valid = SequenceLog::Encode(mine, {StateRecord("n1", 1, 1)});
  const std::string magic = valid.substr(0, 8);
  const size_t header_size = SequenceLog::Encode(mine, {}).size();
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    std::string file = magic;
    if (i % 2 == 0) {
      // A mutation of the valid file's header and first record.
      file = valid;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        const size_t at = 8 + rng() % (file.size() - 8);
        file[at] = static_cast<char>(rng());
      }
      file.resize(8 + rng() % (file.size() - 7));
    } else {
      const size_t n = rng() % 64;
      for (size_t k = 0; k < n; ++k) file.push_back(static_cast<char>(rng()));
    }
    std::vector<std::string> warnings;
    std::vector<SequenceRecord> out = SequenceLog::Decode(file, mine, &warnings);
    if (file.size() >= header_size && file.compare(0, header_size, valid, 0, header_size) == 0) {
      continue;  // The header survived: damaged records are the other tests' business.
    }
    EXPECT_TRUE(out.empty()) << i;
    ASSERT_EQ(warnings.size(), 1u) << i;
    EXPECT_THAT(warnings[0], HasSubstr("every sequence in it dropped")) << i;
  }
}

TEST(SequenceLogTest, PayloadsThatLieAboutTheirTensorsAreRefused) {
  auto payload = [](uint64_t nbytes, int32_t dtype, int64_t dim) {
    std::string p;
    auto put = [&p](const void* v, size_t n) { p.append(static_cast<const char*>(v), n); };
    uint8_t ended = 0;
    uint32_t key_size = 2, tensors = 1, rank = 2;
    uint64_t steps = 3;
    int64_t one = 1;
    put(&ended, 1);
    put(&key_size, 4);
    p.append("n7");
    put(&steps, 8);
    put(&tensors, 4);
    put(&dtype, 4);
    put(&rank, 4);
    put(&one, 8);
    put(&dim, 8);
    put(&nbytes, 8);
    p.append(std::string(16, '\0'));
    return p;
  };
  const std::string header = SequenceLog::Encode(kIdentity, {});
  std::vector<std::string> warnings;
  // The fuzzer seed's layout (fuzz/make_seeds.sh): a float32[1,4] state, 67 bytes.
  ASSERT_EQ(payload(16, 1, 4).size(), 67u);
  EXPECT_EQ(
      SequenceLog::Decode(header + SequenceLog::Frame(payload(16, 1, 4)), kIdentity, &warnings)
          .size(),
      1u);
  for (const std::string& bad : {payload(15, 1, 4), payload(16, 8, 4) /* strings */,
                                 payload(16, 99, 4), payload(16, 1, -4)}) {
    warnings.clear();
    EXPECT_TRUE(
        SequenceLog::Decode(header + SequenceLog::Frame(bad), kIdentity, &warnings).empty());
    EXPECT_EQ(warnings.size(), 1u);
  }
}

TEST(SequenceLogTest, OpenRestoresTheLastRecordPerSequenceAndCompacts) {
  namespace fs = std::filesystem;
  const fs::path path =
      fs::path(::testing::TempDir()) / ("cuvil_seqlog_" + std::to_string(getpid()) + ".seqlog");
  fs::remove(path);
  std::vector<SequenceRecord> restored;
  std::vector<std::string> warnings;
  {
    auto log = SequenceLog::Open(path.string(), kIdentity, &restored, &warnings);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_TRUE(restored.empty());
    for (uint64_t step = 5; step <= 20; step += 5) {
      ASSERT_TRUE((*log)->Append(StateRecord("n1", step, static_cast<float>(step))).ok());
      ASSERT_TRUE((*log)->Append(StateRecord("n2", step, -static_cast<float>(step))).ok());
    }
    ASSERT_TRUE((*log)->Append({"n2", true, 20, {}}).ok());
  }
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  const auto before = fs::file_size(path);
  auto log = SequenceLog::Open(path.string(), kIdentity, &restored, &warnings);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(restored.size(), 1u);  // n2 ended.
  EXPECT_EQ(restored[0].key, "n1");
  EXPECT_EQ(restored[0].steps, 20u);
  EXPECT_EQ(First(restored[0]), 20.0f);
  EXPECT_LT(fs::file_size(path), before / 4);
  // A newer build of the version opens (and compacts) the same file: the older one's appends
  // follow the file to its new inode instead of vanishing with the replaced one.
  std::vector<SequenceRecord> again;
  auto newer = SequenceLog::Open(path.string(), kIdentity, &again, &warnings);
  ASSERT_TRUE(newer.ok()) << newer.status();
  ASSERT_TRUE((*log)->Append(StateRecord("n1", 25, 25.0f)).ok());
  newer->reset();
  auto latest = SequenceLog::Open(path.string(), kIdentity, &again, &warnings);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].steps, 25u);
  // Compact rewrites the file with just the live records.
  ASSERT_TRUE((*latest)->Compact({StateRecord("n9", 3, 9.0f)}).ok());
  latest->reset();
  log->reset();
  ASSERT_TRUE(SequenceLog::Open(path.string(), kIdentity, &again, &warnings).ok());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].key, "n9");
  // A symlink in the log's place is refused, not followed.
  fs::remove(path);
  fs::create_symlink("/etc/passwd", path);
  EXPECT_FALSE(SequenceLog::Open(path.string(), kIdentity, &restored, &warnings).ok());
  fs::remove(path);
}

}  // namespace
}  // namespace cuvil
