// cuvil-probe: attaches BPF programs to the `cuvil` USDT probes of a running cuvil-server (or any
// binary carrying them) and exports the in-kernel aggregates as Prometheus metrics, in the
// manner of cloudflare's ebpf_exporter. See tools/cuvil-probe/README.md.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <httplib.h>
#include <linux/types.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "cuvil_probe.h"
// bpftool's skeleton declares the .kconfig externs with C's _Bool, which g++ accepts in C++ and
// clang++ (the sanitizer build's compiler) does not.
#if defined(__clang__)
#define _Bool bool
#endif
#include "cuvil_probe.skel.h"
#if defined(__clang__)
#undef _Bool
#endif
#include "probe_metrics.h"

namespace cuvil::probe {
namespace {

constexpr char kUsage[] =
    "usage: cuvil-probe (--pid PID | --binary PATH) [--pid PID --binary LIB]\n"
    "                   [--metrics-port N] [--metrics-host HOST] [--print]\n"
    "                   [--interval-secs N] [--duration-secs N] [--verbose]\n"
    "\n"
    "Attaches to the USDT probes of provider `cuvil` and serves Prometheus metrics on\n"
    "http://HOST:PORT/metrics (default 0.0.0.0:9435; port 0 picks a free port).\n"
    "  --pid PID          trace this process (its executable unless --binary names a library)\n"
    "  --binary PATH      trace every process running PATH (or, with --pid, the library PATH)\n"
    "  --print            print per-model log2 latency histograms every interval and on exit\n"
    "  --interval-secs N  print interval (default 5)\n"
    "  --duration-secs N  exit after N seconds (default: run until SIGINT/SIGTERM)\n"
    "  --verbose          show libbpf's log\n";

struct Options {
  int pid = -1;
  std::string binary;
  int metrics_port = 9435;
  std::string metrics_host = "0.0.0.0";
  bool print = false;
  int interval_secs = 5;
  int duration_secs = 0;
  bool verbose = false;
};

bool g_verbose = false;

// libbpf's own log only with --verbose: failures are reported by cuvil-probe, in one line.
int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (!g_verbose) return 0;
  return std::vfprintf(stderr, format, args);
}

std::optional<int> ParseInt(std::string_view text, int min) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min) return std::nullopt;
  return value;
}

// Returns the options, or nullopt after printing why they are wrong.
std::optional<Options> ParseArgs(int argc, char** argv) {
  Options o;
  bool have_pid = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_inline_value = false;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline_value = true;
    }
    auto next = [&]() -> std::optional<std::string_view> {
      if (has_inline_value) return value;
      if (i + 1 >= argc) return std::nullopt;
      return std::string_view(argv[++i]);
    };
    auto int_flag = [&](int& out, int min) -> bool {
      auto text = next();
      auto parsed = text ? ParseInt(*text, min) : std::nullopt;
      if (!parsed) {
        std::fprintf(stderr, "cuvil-probe: %.*s needs an integer >= %d\n",
                     static_cast<int>(arg.size()), arg.data(), min);
        return false;
      }
      out = *parsed;
      return true;
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--pid") {
      if (!int_flag(o.pid, 1)) return std::nullopt;
      have_pid = true;
    } else if (arg == "--binary") {
      auto text = next();
      if (!text || text->empty()) {
        std::fprintf(stderr, "cuvil-probe: --binary needs a path\n");
        return std::nullopt;
      }
      o.binary = std::string(*text);
    } else if (arg == "--metrics-port") {
      if (!int_flag(o.metrics_port, 0)) return std::nullopt;
      if (o.metrics_port > 65535) {
        std::fprintf(stderr, "cuvil-probe: --metrics-port must be <= 65535\n");
        return std::nullopt;
      }
    } else if (arg == "--metrics-host") {
      auto text = next();
      if (!text || text->empty()) {
        std::fprintf(stderr, "cuvil-probe: --metrics-host needs an address\n");
        return std::nullopt;
      }
      o.metrics_host = std::string(*text);
    } else if (arg == "--print") {
      o.print = true;
    } else if (arg == "--interval-secs") {
      if (!int_flag(o.interval_secs, 1)) return std::nullopt;
    } else if (arg == "--duration-secs") {
      if (!int_flag(o.duration_secs, 1)) return std::nullopt;
    } else if (arg == "--verbose" || arg == "-v") {
      o.verbose = true;
    } else {
      std::fprintf(stderr, "cuvil-probe: unknown argument '%s'\n%s", argv[i], kUsage);
      return std::nullopt;
    }
  }
  if (!have_pid && o.binary.empty()) {
    std::fprintf(stderr, "cuvil-probe: one of --pid or --binary is required\n%s", kUsage);
    return std::nullopt;
  }
  return o;
}

std::string FromFixed(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

// Iterates a BPF hash map's keys with bpf_map_get_next_key, calling fn(key, value).
template <typename Key, typename Value, typename Fn>
void ForEachEntry(int fd, Fn&& fn) {
  Key key{};
  Key next{};
  Value value{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, &value) == 0) fn(next, value);
    key = next;
    prev = &key;
  }
}

Snapshot ReadSnapshot(const cuvil_probe_bpf* skel, int probes_attached) {
  Snapshot s;
  s.probes_attached = probes_attached;
  auto read_hist = [](int fd, std::map<std::string, Log2Hist>& out) {
    ForEachEntry<cuvil_probe_hist_key, __u64>(fd, [&](const cuvil_probe_hist_key& k, __u64 count) {
      if (k.bucket >= static_cast<__u32>(kBuckets)) return;
      auto [it, inserted] = out.try_emplace(FromFixed(k.model, sizeof(k.model)));
      if (inserted) it->second.fill(0);
      it->second[k.bucket] += count;
    });
  };
  read_hist(bpf_map__fd(skel->maps.latency_hist), s.latency_ns);
  read_hist(bpf_map__fd(skel->maps.batch_hist), s.batch_size);
  ForEachEntry<cuvil_probe_status_key, __u64>(
      bpf_map__fd(skel->maps.requests), [&](const cuvil_probe_status_key& k, __u64 count) {
        s.requests[{FromFixed(k.model, sizeof(k.model)), k.status}] += count;
      });
  ForEachEntry<cuvil_probe_event_key, cuvil_probe_event_value>(
      bpf_map__fd(skel->maps.events),
      [&](const cuvil_probe_event_key& k, const cuvil_probe_event_value& v) {
        EventTotals& t = s.events[{k.kind, FromFixed(k.model, sizeof(k.model)),
                                   FromFixed(k.extra, sizeof(k.extra))}];
        t.count += v.count;
        t.sum_ns += v.sum_ns;
        t.sum_value += v.sum_value;
      });
  __u32 idx = CUVIL_STAT_UPDATE_FAILURES;
  __u64 failures = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.stats), &idx, &failures) == 0) {
    s.update_failures = failures;
  }
  return s;
}

// BPF program name -> USDT probe name: request_done -> request__done.
std::string ProbeName(std::string_view program) {
  std::string out;
  for (char c : program) {
    if (c == '_') {
      out += "__";
    } else {
      out += c;
    }
  }
  return out;
}

struct SkelDeleter {
  void operator()(cuvil_probe_bpf* skel) const { cuvil_probe_bpf__destroy(skel); }
};

int Run(const Options& opt) {
  g_verbose = opt.verbose;
  libbpf_set_print(LibbpfPrint);

  std::string binary = opt.binary;
  if (opt.pid > 0) {
    if (kill(opt.pid, 0) != 0 && errno == ESRCH) {
      std::fprintf(stderr, "cuvil-probe: no process with pid %d\n", opt.pid);
      return 1;
    }
    if (binary.empty()) binary = "/proc/" + std::to_string(opt.pid) + "/exe";
  }
  std::unique_ptr<cuvil_probe_bpf, SkelDeleter> skel(cuvil_probe_bpf__open());
  if (!skel) {
    std::fprintf(stderr, "cuvil-probe: cannot open BPF object: %s\n", std::strerror(errno));
    return 1;
  }
  if (int err = cuvil_probe_bpf__load(skel.get()); err != 0) {
    int e = err < 0 ? -err : err;
    if (e == EPERM || e == EACCES) {
      std::fprintf(stderr, "cuvil-probe: cannot load BPF programs (need root/CAP_BPF): %s\n",
                   std::strerror(e));
    } else {
      std::fprintf(stderr, "cuvil-probe: cannot load BPF programs: %s\n", std::strerror(e));
    }
    return 1;
  }

  // After loading, so that a missing privilege is what an unprivileged user hears about.
  struct stat st;
  if (stat(binary.c_str(), &st) != 0) {
    std::fprintf(stderr, "cuvil-probe: cannot open %s: %s\n", binary.c_str(), std::strerror(errno));
    return 1;
  }

  std::vector<bpf_link*> links;
  struct LinkCleanup {
    std::vector<bpf_link*>& links;
    ~LinkCleanup() {
      for (bpf_link* l : links) bpf_link__destroy(l);
    }
  } cleanup{links};
  std::vector<std::string> missing;
  int first_error = 0;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, skel->obj) {
    std::string probe = ProbeName(bpf_program__name(prog));
    bpf_link* link =
        bpf_program__attach_usdt(prog, opt.pid, binary.c_str(), "cuvil", probe.c_str(), nullptr);
    if (link == nullptr) {
      int e = errno;
      if (e == ENOENT) {
        missing.push_back(probe);
      } else if (first_error == 0) {
        first_error = e;
        std::fprintf(stderr, "cuvil-probe: cannot attach cuvil:%s in %s: %s\n", probe.c_str(),
                     binary.c_str(), std::strerror(e));
      }
      continue;
    }
    links.push_back(link);
  }
  if (links.empty()) {
    if (first_error == EPERM || first_error == EACCES) {
      std::fprintf(stderr, "cuvil-probe: cannot attach uprobes (need root/CAP_PERFMON): %s\n",
                   std::strerror(first_error));
    } else if (first_error == 0) {
      std::fprintf(stderr, "cuvil-probe: no USDT probes of provider cuvil in %s\n", binary.c_str());
    }
    return 1;
  }
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    std::fprintf(stderr, "cuvil-probe: %s has no probe cuvil:{%s}; not counted\n", binary.c_str(),
                 list.c_str());
  }
  const int attached = static_cast<int>(links.size());
  std::fprintf(stderr, "cuvil-probe: attached %d USDT probes in %s%s\n", attached, binary.c_str(),
               opt.pid > 0 ? (" (pid " + std::to_string(opt.pid) + ")").c_str() : "");

  // SIGINT/SIGTERM are blocked in every thread and taken with sigtimedwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  httplib::Server server;
  const cuvil_probe_bpf* skel_ptr = skel.get();
  server.Get("/metrics", [skel_ptr, attached](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(RenderPrometheus(ReadSnapshot(skel_ptr, attached)),
                      "text/plain; version=0.0.4; charset=utf-8");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("cuvil-probe: ") + e.what() + "\n", "text/plain");
    }
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("<html><body><a href=\"/metrics\">/metrics</a></body></html>\n", "text/html");
  });
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second exporter share the port
  // (the kernel splitting scrapes between the two) instead of failing to bind.
  server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  int port = opt.metrics_port;
  if (port == 0) {
    port = server.bind_to_any_port(opt.metrics_host);
    if (port < 0) port = -1;
  } else if (!server.bind_to_port(opt.metrics_host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "cuvil-probe: cannot listen on %s:%d\n", opt.metrics_host.c_str(),
                 opt.metrics_port);
    return 1;
  }
  std::thread http([&server] { server.listen_after_bind(); });
  std::printf("listening metrics=%s:%d\n", opt.metrics_host.c_str(), port);
  std::fflush(stdout);

  auto print_view = [&] {
    std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%H:%M:%S", std::localtime(&now));
    std::string view = RenderTerminal(ReadSnapshot(skel.get(), attached));
    std::printf("%s (since attach)\n%s", stamp, view.empty() ? "(no requests yet)\n\n" : "");
    std::fputs(view.c_str(), stdout);
    std::fflush(stdout);
  };

  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  auto elapsed_secs = [&] {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<double>(now.tv_sec - start.tv_sec) +
           static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9;
  };
  double next_print = opt.interval_secs;
  while (true) {
    double now = elapsed_secs();
    double wake = opt.print ? next_print : 3600.0 + now;
    if (opt.duration_secs > 0 && opt.duration_secs < wake) wake = opt.duration_secs;
    double wait = wake - now;
    if (wait < 0) wait = 0;
    timespec timeout;
    timeout.tv_sec = static_cast<time_t>(wait);
    timeout.tv_nsec = static_cast<long>((wait - static_cast<double>(timeout.tv_sec)) * 1e9);
    int sig = sigtimedwait(&stop_signals, nullptr, &timeout);
    if (sig == SIGINT || sig == SIGTERM) break;
    now = elapsed_secs();
    if (opt.duration_secs > 0 && now >= opt.duration_secs) break;
    if (opt.print && now >= next_print) {
      print_view();
      while (next_print <= now) next_print += opt.interval_secs;
    }
  }
  if (opt.print) print_view();
  server.stop();
  http.join();
  return 0;
}

}  // namespace
}  // namespace cuvil::probe

int main(int argc, char** argv) {
  try {
    auto options = cuvil::probe::ParseArgs(argc, argv);
    if (!options) return 2;
    return cuvil::probe::Run(*options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuvil-probe: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "cuvil-probe: unknown error\n");
  }
  return 1;
}
