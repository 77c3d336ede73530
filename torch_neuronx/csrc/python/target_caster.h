// A Trainium target (neuron_rt::Target) as a binding argument or result:
// Python passes and gets its name ("trn2"). A name is parsed by
// neuron_rt::parseTarget, the one parser; an unknown one raises ValueError
// naming the valid targets.
#pragma once

#include <neuron_runtime/hardware_table.h>
#include <neuron_runtime/status.h>
#include <pybind11/pybind11.h>

#include <string>

namespace pybind11 {
namespace detail {

template <>
struct type_caster<neuron_rt::Target> {
  PYBIND11_TYPE_CASTER(neuron_rt::Target, const_name("str"));

  bool load(handle src, bool) {
    if (!isinstance<str>(src)) return false;
    try {
      value = neuron_rt::parseTarget(src.cast<std::string>());
    } catch (const neuron_rt::Error& e) {
      throw value_error(e.what());
    }
    return true;
  }

  static handle cast(neuron_rt::Target t, return_value_policy, handle) {
    return str(neuron_rt::targetName(t)).release();
  }
};

}  // namespace detail
}  // namespace pybind11
