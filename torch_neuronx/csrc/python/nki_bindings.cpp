// Bindings of the NKI simulator: torch_neuronx.nki traces a kernel into flat
// records, builds a _NkiProgram from them (checked, planned and timed by the
// runtime's simulator), and runs it on host memory (NumPy arrays, CPU
// tensors) or launches it as ONE work item on a neuron stream.
#include <ATen/Parallel.h>
#include <neuron_runtime/nki/cost_model.h>
#include <neuron_runtime/nki/parallel.h>
#include <neuron_runtime/nki/program.h>
#include <pybind11/numpy.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aten/op_stats.h"
#include "core/stream.h"

namespace py = pybind11;
namespace nki = neuron_rt::nki;

namespace torch_neuronx {
namespace {

py::object& programErrorType() {
  static py::object* type = nullptr;
  if (!type) type = new py::object();
  return *type;
}

// The check failed: a Python exception that carries the source location id
// and the instruction, for the front end to turn into a kernel-line error.
[[noreturn]] void raiseProgramError(const nki::ProgramError& e) {
  py::object type = programErrorType();
  py::object inst = type(e.what());
  inst.attr("loc") = e.loc();
  inst.attr("instruction") = e.instruction();
  PyErr_SetObject(type.ptr(), inst.ptr());
  throw py::error_already_set();
}

std::vector<void*> addressesOf(const std::vector<int64_t>& a) {
  std::vector<void*> out(a.size());
  for (size_t k = 0; k < a.size(); ++k)
    out[k] = reinterpret_cast<void*>(static_cast<intptr_t>(a[k]));
  return out;
}

py::dict profileDict(const nki::Profile& p) {
  py::dict d;
  d["total_ns"] = p.total_ns;
  py::dict busy, count;
  for (int e = 0; e < nki::kEngines; ++e) {
    const char* name = nki::engineName(static_cast<nki::Engine>(e));
    busy[name] = p.busy_ns[e];
    count[name] = p.instructions[e];
  }
  d["busy_ns"] = busy;
  d["instructions"] = count;
  d["dma_bytes"] = p.dma_bytes;
  d["matmul_flops"] = p.matmul_flops;
  d["sbuf_high_water"] = p.sbuf_high_water;
  d["psum_high_water"] = p.psum_high_water;
  return d;
}

}  // namespace

void bindNki(py::module_& m) {
  // The simulator's large instructions run on ATen's pool, as ops do.
  nki::setParallelFor([](int64_t begin, int64_t end, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& body) {
    at::parallel_for(begin, end, grain, body);
  });
  programErrorType() = py::reinterpret_borrow<py::object>(PyErr_NewException(
      "torch_neuronx._C._NkiProgramError", PyExc_ValueError, nullptr));
  m.attr("_NkiProgramError") = programErrorType();
  // NKI launches and the ops routed to NKI kernels show in get_executed_ops().
  m.def("_note_executed", [](const std::string& name) { noteExecuted(name); });

  py::class_<nki::Program, std::shared_ptr<nki::Program>>(m, "_NkiProgram")
      .def(
          py::init(
              [](py::array_t<int64_t, py::array::c_style | py::array::forcecast>
                     buffers,
                 py::array_t<int64_t, py::array::c_style | py::array::forcecast>
                     words,
                 py::array_t<double, py::array::c_style | py::array::forcecast>
                     imms,
                 int externals) {
                const int64_t nb = buffers.size() / nki::kBufferWords;
                const int64_t ni = words.size() / nki::kInstructionWords;
                TORCH_CHECK(buffers.size() == nb * nki::kBufferWords &&
                                words.size() == ni * nki::kInstructionWords &&
                                imms.size() == ni * 4,
                            "NKI: malformed program records");
                try {
                  return std::make_shared<nki::Program>(
                      nki::buildProgram(buffers.data(), nb, words.data(),
                                        imms.data(), ni, externals));
                } catch (const nki::ProgramError& e) {
                  raiseProgramError(e);
                }
              }),
          py::arg("buffers"), py::arg("instructions"), py::arg("immediates"),
          py::arg("externals"))
      .def_property_readonly("externals", &nki::Program::externals)
      .def_property_readonly("scratch_bytes", &nki::Program::scratchBytes)
      .def_property_readonly(
          "num_instructions",
          [](const nki::Program& p) {
            return static_cast<int64_t>(p.instructions().size());
          })
      // Runs on the calling thread over host addresses (NumPy, CPU tensors).
      .def("run_host",
           [](const nki::Program& p, const std::vector<int64_t>& addresses) {
             TORCH_CHECK(
                 static_cast<int64_t>(addresses.size()) == p.externals(),
                 "NKI: the kernel takes ", p.externals(), " tensors, got ",
                 addresses.size());
             std::vector<void*> ptrs = addressesOf(addresses);
             py::gil_scoped_release release;
             p.run(ptrs.data());
           })
      // Queues the run as one work item on the current stream of `device`.
      .def("launch",
           [](std::shared_ptr<const nki::Program> p,
              const std::vector<int64_t>& addresses, int device,
              const std::string& label) {
             TORCH_CHECK(
                 static_cast<int64_t>(addresses.size()) == p->externals(),
                 "NKI: the kernel takes ", p->externals(), " tensors, got ",
                 addresses.size());
             launch(static_cast<c10::DeviceIndex>(device), internLabel(label),
                    [p = std::move(p), ptrs = addressesOf(addresses)] {
                      p->run(ptrs.data());
                    });
           })
      .def(
          "profile",
          [](const nki::Program& p, const std::string& target) {
            if (target == "trn2") return profileDict(p.profile());
            TORCH_CHECK_VALUE(target == "trn1", "NKI: unknown target '", target,
                              "' (use 'trn2' or 'trn1')");
            nki::Profile q =
                nki::estimateCost(p, nki::trainium1CostParameters());
            q.sbuf_high_water = p.profile().sbuf_high_water;
            q.psum_high_water = p.profile().psum_high_water;
            return profileDict(q);
          },
          py::arg("target") = "trn2");
}

}  // namespace torch_neuronx
