#include "bus_error_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace cuvil {
namespace {

// Where this thread's guarded copy resumes after a SIGBUS; null outside a guarded copy.
thread_local sigjmp_buf* guarded_copy_resume = nullptr;

struct sigaction previous_bus_action;  // Written once, before our handler is installed.

void OnBusError(int signal, siginfo_t* info, void* context) {
  if (sigjmp_buf* resume = guarded_copy_resume) siglongjmp(*resume, 1);
  // Not a guarded copy's fault: hand it to whoever handled SIGBUS before us.
  if ((previous_bus_action.sa_flags & SA_SIGINFO) != 0) {
    if (previous_bus_action.sa_sigaction != nullptr) {
      previous_bus_action.sa_sigaction(signal, info, context);
      return;
    }
  } else if (previous_bus_action.sa_handler != SIG_DFL &&
             previous_bus_action.sa_handler != SIG_IGN) {
    previous_bus_action.sa_handler(signal);
    return;
  }
  // The default action: returning re-runs the faulting access, which now terminates the process.
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(SIGBUS, &fallback, nullptr);
}

void InstallBusErrorHandler() {
  struct sigaction action = {};
  action.sa_sigaction = OnBusError;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous_bus_action);
}

}  // namespace

bool CopyCatchingBusErrors(void* dst, const void* src, size_t bytes) {
  static std::once_flag installed;
  std::call_once(installed, InstallBusErrorHandler);
  sigjmp_buf resume;
  // Saves the signal mask (1) so jumping out of the handler unblocks SIGBUS again.
  if (sigsetjmp(resume, 1) != 0) {
    guarded_copy_resume = nullptr;
    return false;
  }
  guarded_copy_resume = &resume;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, bytes);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  guarded_copy_resume = nullptr;
  return true;
}

}  // namespace cuvil
