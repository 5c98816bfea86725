#include "grpc_cq_driver.h"

#include <algorithm>

namespace cuvil {

void CqDriver::Start(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([cq = cq_.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) static_cast<CqTag*>(tag)->Proceed(ok);
    });
  }
}

void CqDriver::Shutdown() {
  if (shut_down_ || cq_ == nullptr) return;
  shut_down_ = true;
  cq_->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace cuvil
