// torch_neuronx._C adaptive-eager bindings: the switch, its settings and its
// statistics (runtime/include/neuron_runtime/sequence_adapter.h).
#include <neuron_runtime/sequence_adapter.h>
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace torch_neuronx {

void bindAdaptive(py::module_& m) {
  m.def("_adaptive_set_enabled",
        [](bool on) { neuron_rt::adaptiveSettings().enabled.store(on); });
  m.def("_adaptive_enabled",
        [] { return neuron_rt::adaptiveSettings().enabled.load(); });
  // 0 (or less) leaves a setting as it is.
  m.def(
      "_adaptive_configure",
      [](int threshold, int max_sequences, int max_fruitless_windows,
         int max_fruitless_adaptations) {
        auto& s = neuron_rt::adaptiveSettings();
        if (threshold > 0) s.threshold = threshold;
        if (max_sequences > 0) s.max_sequences = max_sequences;
        if (max_fruitless_windows > 0)
          s.max_fruitless_windows = max_fruitless_windows;
        if (max_fruitless_adaptations > 0)
          s.max_fruitless_adaptations = max_fruitless_adaptations;
      },
      py::arg("threshold"), py::arg("max_sequences"),
      py::arg("max_fruitless_windows"),
      py::arg("max_fruitless_adaptations") = 0);
  m.def("_adaptive_set_fuse",
        [](bool on) { neuron_rt::adaptiveSettings().fuse.store(on); });
  m.def("_adaptive_settings", [] {
    auto& s = neuron_rt::adaptiveSettings();
    py::dict d;
    d["fuse"] = s.fuse.load();
    d["threshold"] = s.threshold.load();
    d["max_sequences"] = s.max_sequences.load();
    d["max_fruitless_windows"] = s.max_fruitless_windows.load();
    d["max_fruitless_adaptations"] = s.max_fruitless_adaptations.load();
    return d;
  });
  m.def("_adaptive_stats", [] {
    auto& s = neuron_rt::adaptiveStats();
    py::dict d;
    d["windows"] = s.windows.load();
    d["sequences_adapted"] = s.adapted.load();
    d["replays"] = s.replays.load();
    d["deviations"] = s.deviations.load();
    d["items_in_replays"] = s.items_held.load();
    d["evictions"] = s.evictions.load();
    d["streams_given_up"] = s.streams_given_up.load();
    d["cached_sequences"] = s.cached.load();
    d["sequences_never_replayed"] = s.never_replayed.load();
    d["families_stopped"] = s.families_stopped.load();
    d["windows_not_adapted"] = s.skipped.load();
    d["fused_groups"] = s.fused_groups.load();
    d["items_fused"] = s.fused_items.load();
    return d;
  });
  m.def("_adaptive_reset_stats", &neuron_rt::resetAdaptiveStats);
  // Every stream forgets its sequences, counts and whether it gave up.
  m.def("_adaptive_forget", [] { neuron_rt::adaptiveSettings().generation++; });
}

}  // namespace torch_neuronx
