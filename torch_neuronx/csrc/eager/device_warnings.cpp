#include "eager/device_warnings.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

namespace torch_neuronx {
namespace {

class OncePerMessage final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    std::string msg = warning.msg();
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!seen_.insert(msg).second) return;
    }
    std::fprintf(stderr, "[torch_neuronx] warning from device work: %s\n",
                 msg.c_str());
  }

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
};

}  // namespace

void useDeviceWarningHandler() {
  static OncePerMessage* handler = new OncePerMessage();
  thread_local bool installed = false;
  if (installed) return;
  c10::WarningUtils::set_warning_handler(handler);
  installed = true;
}

}  // namespace torch_neuronx
