// cuvil_probe_target: fires the `cuvil` USDT probes (same names, argument types and semaphores as
// observability/include/cuvil/observability/probes.h) a known number of times with known values,
// for cuvil_probe_test. It waits until a tracer has enabled every probe's semaphore, so no event
// is fired before cuvil-probe is attached.
//
//   cuvil_probe_target [--count N] [--models a,b,...] [--wait-secs S]
//
// Per model and i in [0, N): latency (1 + i % 4) ms, status 500 if i % 5 == 4 else 200,
// batch size 2^(i % 4), batch duration 1 us per sample.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#define CUVIL_TARGET_SEMAPHORE(name)                                          \
  extern "C" {                                                                \
  __extension__ unsigned short cuvil_##name##_semaphore __attribute__((used)) \
  __attribute__((section(".probes")));                                        \
  }

CUVIL_TARGET_SEMAPHORE(request__start)
CUVIL_TARGET_SEMAPHORE(request__done)
CUVIL_TARGET_SEMAPHORE(batch__start)
CUVIL_TARGET_SEMAPHORE(batch__done)
CUVIL_TARGET_SEMAPHORE(jit__compile__start)
CUVIL_TARGET_SEMAPHORE(jit__compile__done)
CUVIL_TARGET_SEMAPHORE(cache__hit)
CUVIL_TARGET_SEMAPHORE(cache__miss)
CUVIL_TARGET_SEMAPHORE(patch__applied)
CUVIL_TARGET_SEMAPHORE(patch__rolled__back)
CUVIL_TARGET_SEMAPHORE(model__load)
CUVIL_TARGET_SEMAPHORE(model__unload)

namespace {

unsigned short Load(const unsigned short& semaphore) {
  return __atomic_load_n(&semaphore, __ATOMIC_RELAXED);
}

#define CUVIL_TARGET_ENABLED(name) (Load(cuvil_##name##_semaphore) != 0)

bool AllEnabled() {
  return CUVIL_TARGET_ENABLED(request__start) && CUVIL_TARGET_ENABLED(request__done) &&
         CUVIL_TARGET_ENABLED(batch__start) && CUVIL_TARGET_ENABLED(batch__done) &&
         CUVIL_TARGET_ENABLED(jit__compile__start) && CUVIL_TARGET_ENABLED(jit__compile__done) &&
         CUVIL_TARGET_ENABLED(cache__hit) && CUVIL_TARGET_ENABLED(cache__miss) &&
         CUVIL_TARGET_ENABLED(patch__applied) && CUVIL_TARGET_ENABLED(patch__rolled__back) &&
         CUVIL_TARGET_ENABLED(model__load) && CUVIL_TARGET_ENABLED(model__unload);
}

void FireModel(const std::string& model, int count) {
  const char* m = model.c_str();
  const char* version = "1";
  if (CUVIL_TARGET_ENABLED(model__load)) STAP_PROBE2(cuvil, model__load, m, version);
  if (CUVIL_TARGET_ENABLED(jit__compile__start)) STAP_PROBE1(cuvil, jit__compile__start, m);
  if (CUVIL_TARGET_ENABLED(jit__compile__done)) {
    int64_t compile_ns = 5'000'000;
    STAP_PROBE2(cuvil, jit__compile__done, m, compile_ns);
  }
  if (CUVIL_TARGET_ENABLED(cache__miss)) STAP_PROBE1(cuvil, cache__miss, m);
  for (int i = 0; i < 2; ++i) {
    if (CUVIL_TARGET_ENABLED(cache__hit)) STAP_PROBE1(cuvil, cache__hit, m);
  }
  const char* function = "matmul_0";
  if (CUVIL_TARGET_ENABLED(patch__applied)) STAP_PROBE2(cuvil, patch__applied, m, function);
  if (CUVIL_TARGET_ENABLED(patch__rolled__back)) {
    STAP_PROBE2(cuvil, patch__rolled__back, m, function);
  }
  for (int i = 0; i < count; ++i) {
    std::string id = model + "-" + std::to_string(i);
    const char* request_id = id.c_str();
    int64_t batch_size = int64_t{1} << (i % 4);
    int64_t batch_ns = 1000 * batch_size;
    int64_t status = i % 5 == 4 ? 500 : 200;
    int64_t latency_ns = 1'000'000 * (1 + i % 4);
    if (CUVIL_TARGET_ENABLED(request__start)) {
      STAP_PROBE3(cuvil, request__start, m, version, request_id);
    }
    if (CUVIL_TARGET_ENABLED(batch__start)) STAP_PROBE2(cuvil, batch__start, m, batch_size);
    if (CUVIL_TARGET_ENABLED(batch__done)) {
      STAP_PROBE3(cuvil, batch__done, m, batch_size, batch_ns);
    }
    if (CUVIL_TARGET_ENABLED(request__done)) {
      STAP_PROBE5(cuvil, request__done, m, version, request_id, status, latency_ns);
    }
  }
  if (CUVIL_TARGET_ENABLED(model__unload)) STAP_PROBE2(cuvil, model__unload, m, version);
}

bool ParseInt(std::string_view text, int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 100;
  int wait_secs = 30;
  std::vector<std::string> models = {"resnet18"};
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--count" && has_value && ParseInt(argv[i + 1], count)) {
      ++i;
    } else if (arg == "--wait-secs" && has_value && ParseInt(argv[i + 1], wait_secs)) {
      ++i;
    } else if (arg == "--models" && has_value) {
      models.clear();
      std::string_view list = argv[++i];
      while (!list.empty()) {
        size_t comma = list.find(',');
        models.emplace_back(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
    } else {
      std::fprintf(stderr,
                   "usage: cuvil_probe_target [--count N] [--models a,b] [--wait-secs S]\n");
      return 2;
    }
  }
  std::printf("pid=%d\n", static_cast<int>(getpid()));
  std::fflush(stdout);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_secs);
  while (!AllEnabled()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "cuvil_probe_target: probes not enabled after %d s\n", wait_secs);
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (const std::string& model : models) FireModel(model, count);
  std::printf("fired count=%d models=%zu\n", count, models.size());
  return 0;
}
