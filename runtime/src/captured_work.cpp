#include "neuron_runtime/captured_work.h"

#include <exception>
#include <stdexcept>
#include <string>

#include "neuron_runtime/status.h"

namespace neuron_rt {

void CapturedWork::run(const char* label) const {
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    auto where = [&] {
      return std::string(s.label) + " (step " + std::to_string(i + 1) + " of " +
             label + "): ";
    };
    try {
      if (s.task)
        s.task->run();
      else
        s.fn();
    } catch (const Error& e) {
      throw Error(e.status(), where() + e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error(where() + e.what());
    }
  }
}

}  // namespace neuron_rt
