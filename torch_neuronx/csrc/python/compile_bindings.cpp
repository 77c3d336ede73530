// Bindings of compiled programs: torch_neuronx.compile's Inductor wrapper
// code opens a _ProgramLaunch around each call of a compiled graph and
// launches its C++ kernels through it.
#include <dlfcn.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compile/program_launch.h"
#include "core/graph.h"
#include "core/stream.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

struct KernelEntry {
  void* address;
  const char* label;
};

// The entry point of an Inductor C++ kernel: the `kernel` symbol of the
// extension module its Python binding (`fn`) belongs to.
KernelEntry resolveKernel(py::handle fn, const std::string& name) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<PyObject*, KernelEntry>();
  std::lock_guard<std::mutex> g(mu);
  auto it = cache->find(fn.ptr());
  if (it != cache->end()) return it->second;
  std::string path = py::str(fn.attr("__self__").attr("__file__"));
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(lib, "neuron: cannot open the compiled kernel ", name, " (", path,
              "): ", dlerror());
  void* address = dlsym(lib, "kernel");
  TORCH_CHECK(address, "neuron: compiled kernel ", name, " (", path,
              ") has no entry point 'kernel'");
  fn.inc_ref();  // the cache keys on the object: keep it alive
  KernelEntry e{address, internLabel(name)};
  cache->emplace(fn.ptr(), e);
  return e;
}

}  // namespace

void bindCompile(py::module_& m) {
  py::class_<ProgramLaunch>(m, "_ProgramLaunch")
      .def(py::init([](std::string name, int device) {
             return std::make_unique<ProgramLaunch>(
                 std::move(name), static_cast<c10::DeviceIndex>(device));
           }),
           py::arg("name"), py::arg("device"))
      .def("begin", &ProgramLaunch::begin)
      .def("end", &ProgramLaunch::end)
      .def_property_readonly("name", &ProgramLaunch::name)
      .def_property_readonly("launches", &ProgramLaunch::launches)
      .def("queued_by_call", &ProgramLaunch::queuedByCall, py::arg("device"),
           py::arg("stream"), py::arg("seq"))
      .def("kernel", [](ProgramLaunch& p, py::handle fn,
                        const std::string& name, py::args args) {
        const KernelEntry e = resolveKernel(fn, name);
        std::vector<ProgramLaunch::KernelArg> values;
        std::vector<at::Tensor> keep;
        values.reserve(args.size());
        const bool traced = ProgramLaunch::tracing();
        ProgramLaunch::StepCost cost;
        for (py::handle a : args) {
          PyObject* o = a.ptr();
          if (THPVariable_Check(o)) {
            const at::Tensor& t = THPVariable_Unpack(o);
            if (traced) {
              cost.bytes += static_cast<double>(t.nbytes());
              cost.elements =
                  std::max(cost.elements, static_cast<double>(t.numel()));
            }
            if (t.is_privateuseone()) {
              values.push_back({reinterpret_cast<int64_t>(t.data_ptr())});
            } else {
              // A graph would replay the value captured now.
              TORCH_CHECK(!currentStreamCapturing(p.device()),
                          "neuron graphs: compiled kernel ", name,
                          " reads a CPU tensor, whose value would be fixed "
                          "at capture; move it to the device");
              // A host tensor (a CPU scalar such as an optimizer's step
              // count): the kernel runs later, and the host may change the
              // tensor meanwhile, so it reads the value it has now, as a
              // copy to the device would.
              keep.push_back(t.clone());
              values.push_back(
                  {reinterpret_cast<int64_t>(keep.back().data_ptr())});
            }
          } else if (PyLong_Check(o)) {
            values.push_back({PyLong_AsLongLong(o)});
            if (PyErr_Occurred()) throw py::error_already_set();
          } else if (PyFloat_Check(o)) {
            ProgramLaunch::KernelArg f;
            f.f = static_cast<float>(PyFloat_AsDouble(o));
            f.is_float = true;
            values.push_back(f);
          } else {
            TORCH_CHECK_TYPE(false, "neuron: compiled kernel ", name,
                             " got an argument of type ", Py_TYPE(o)->tp_name,
                             "; kernels take tensors, integers and floats");
          }
        }
        p.kernel(e.address, e.label, std::move(values), std::move(keep), cost);
      });
}

}  // namespace torch_neuronx
