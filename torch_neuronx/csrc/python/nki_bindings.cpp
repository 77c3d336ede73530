// Bindings of the NKI simulator: torch_neuronx.nki traces a kernel into flat
// records, builds a _NkiProgram from them (checked, planned and timed by the
// runtime's simulator), and runs it on host memory (NumPy arrays, CPU
// tensors) or launches it as ONE work item on a neuron stream.
// _nki_layout() hands the front end the records' layout and codes
// (records.h, program.h, dtype.h), which it takes rather than restates.
#include <ATen/Parallel.h>
#include <neuron_runtime/nki/cost_model.h>
#include <neuron_runtime/nki/dtype.h>
#include <neuron_runtime/nki/parallel.h>
#include <neuron_runtime/nki/program.h>
#include <neuron_runtime/nki/records.h>
#include <neuron_runtime/trace.h>
#include <neuron_runtime/trainium_estimate.h>
#include <pybind11/numpy.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/stream.h"
#include "eager/op_stats.h"

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

// {name: code} of the codes 0..n-1.
template <typename Enum>
py::dict codeNames(int n, const char* (*name)(Enum)) {
  py::dict d;
  for (int k = 0; k < n; ++k) d[name(static_cast<Enum>(k))] = k;
  return d;
}

py::dict layoutDict() {
  py::dict d;
  d["max_dims"] = nki::kMaxDims;
  d["partitions"] = nki::kPartitions;
  d["sbuf_bytes_per_partition"] = nki::kSbufBytesPerPartition;
  d["psum_banks"] = nki::kPsumBanks;
  d["psum_bank_bytes"] = nki::kPsumBankBytes;
  d["spaces"] = codeNames(nki::kSpaces, nki::spaceName);
  d["engines"] = codeNames(nki::kEngines, nki::engineName);
  d["ops"] = codeNames(nki::kOps, nki::opRecordName);
  d["alu"] = codeNames(static_cast<int>(nki::Alu::kCount), nki::aluName);
  d["act"] = codeNames(static_cast<int>(nki::Act::kCount), nki::actName);
  py::dict flags;
  for (const nki::FlagName& f : nki::kFlagNameTable) flags[f.name] = f.flag;
  d["flags"] = flags;
  py::list dtypes;  // in code order
  for (int k = 0; k < static_cast<int>(nki::DType::kCount); ++k) {
    const auto t = static_cast<nki::DType>(k);
    py::dict e;
    e["name"] = nki::dtypeName(t);
    e["code"] = k;
    e["itemsize"] = nki::elementSize(t);
    e["is_float"] = nki::isFloat(t);
    e["is_signed"] = nki::isSigned(t);
    dtypes.append(e);
  }
  d["dtypes"] = dtypes;
  py::list buffer_fields, instruction_fields, accesses, access_fields;
  for (const char* f : nki::kBufferFieldNames) buffer_fields.append(f);
  for (const char* f : nki::kInstructionFieldNames)
    instruction_fields.append(f);
  for (const char* a : nki::kInstructionAccessNames) accesses.append(a);
  for (const nki::AccessField& f : nki::kAccessFieldLayout)
    access_fields.append(py::make_tuple(f.name, f.words));
  d["buffer_fields"] = buffer_fields;
  d["instruction_fields"] = instruction_fields;
  d["instruction_accesses"] = accesses;
  d["access_fields"] = access_fields;  // (name, words) in order
  d["immediates"] = nki::kImmediates;
  return d;
}

// What buildProgram read, by field name: the front end's tests compare it
// with what the front end meant to write.
py::dict accessDict(const int64_t* w) {
  py::dict d;
  for (const nki::AccessField& f : nki::kAccessFieldLayout) {
    if (f.words == 1) {
      d[f.name] = w[f.first_word];
    } else {
      py::list v;
      for (int k = 0; k < f.words; ++k) v.append(w[f.first_word + k]);
      d[f.name] = v;
    }
  }
  return d;
}

py::dict recordsDict(const nki::Program& p) {
  py::list buffers, instructions;
  int64_t bw[nki::kBufferWords];
  for (const nki::Buffer& b : p.buffers()) {
    nki::encodeBuffer(b, bw);
    py::dict d;
    for (int k = 0; k < nki::kBufferWords; ++k)
      d[nki::kBufferFieldNames[k]] = bw[k];
    buffers.append(d);
  }
  int64_t iw[nki::kInstructionWords];
  double imm[nki::kImmediates];
  for (const nki::Instruction& in : p.instructions()) {
    nki::encodeInstruction(in, iw, imm);
    py::dict d;
    for (int k = 0; k < nki::kInstructionHeaderWords; ++k)
      d[nki::kInstructionFieldNames[k]] = iw[k];
    for (int k = 0; k < nki::kInstructionAccesses; ++k)
      d[nki::kInstructionAccessNames[k]] =
          accessDict(iw + nki::kInstructionHeaderWords + k * nki::kAccessWords);
    d["imm"] = py::make_tuple(imm[0], imm[1], imm[2], imm[3]);
    instructions.append(d);
  }
  py::dict d;
  d["buffers"] = buffers;
  d["instructions"] = instructions;
  return d;
}

// ---- the profiler's view of a launch ----------------------------------------

bool tracingItems() {
  return neuron_rt::Runtime::initialized() && runtime().trace().enabled();
}

// The cost model's estimate for the profiler's target (trn2, the default, is
// the program's own; trn1 is estimated again).
std::shared_ptr<const nki::Profile> profileForTarget(const nki::Program& p) {
  if (neuron_rt::trainiumModel().name == "trn1")
    return std::make_shared<const nki::Profile>(
        nki::estimateCost(p, nki::trainium1CostParameters()));
  return std::make_shared<const nki::Profile>(p.profile());
}

// The engines as the NKI documentation names them, by nki::Engine code. The
// trace keeps labels for the life of the process: these are literals.
constexpr const char* kEngineLabels[] = {
    "DMA", "Tensor Engine", "Vector Engine", "Scalar Engine", "GpSimd Engine"};
static_assert(sizeof(kEngineLabels) / sizeof(kEngineLabels[0]) == nki::kEngines,
              "an engine without a label");
static_assert(static_cast<int>(nki::Engine::kDma) == 0 &&
                  static_cast<int>(nki::Engine::kTensor) == 1 &&
                  static_cast<int>(nki::Engine::kVector) == 2 &&
                  static_cast<int>(nki::Engine::kScalar) == 3 &&
                  static_cast<int>(nki::Engine::kGpSimd) == 4,
              "kEngineLabels follows nki::Engine's order");

int64_t roundNs(double ns) { return static_cast<int64_t>(std::llround(ns)); }

// Describes the launch about to be queued: a kernel whose estimate is the
// cost model's total, its matmul flops and DMA traffic.
void noteKernel(const nki::Profile& prof, const std::string& label) {
  neuron_rt::ItemNote& n = neuron_rt::pendingNote();
  n.category = neuron_rt::ItemCategory::kKernel;
  n.set = true;
  n.estimate_ns = roundNs(prof.total_ns);
  n.flops = static_cast<double>(prof.matmul_flops);
  n.bytes = static_cast<double>(prof.dma_bytes);
  n.tensor_engine = prof.matmul_flops > 0;
  constexpr char kPrefix[] = "nki::";  // kernel.py's label
  const bool prefixed = label.rfind(kPrefix, 0) == 0;
  n.detail = std::make_shared<const std::string>(
      "kernel=" + (prefixed ? label.substr(sizeof(kPrefix) - 1) : label));
}

// On the worker, inside the traced item: each engine the kernel keeps busy,
// as a child carrying the cost model's busy time (engines overlap, so the
// children are estimates only; they take no measured time).
void traceEngines(const nki::Profile& prof) {
  neuron_rt::setRunningItemEstimate(roundNs(prof.total_ns));
  const int64_t now = neuron_rt::nowNs();
  for (int e = 0; e < nki::kEngines; ++e) {
    if (prof.busy_ns[e] <= 0) continue;
    neuron_rt::ItemNote n;
    n.category = neuron_rt::ItemCategory::kEngine;
    n.set = true;
    n.estimate_ns = roundNs(prof.busy_ns[e]);
    n.detail = std::make_shared<const std::string>(
        std::string("engine=") + nki::engineName(static_cast<nki::Engine>(e)) +
        ";instructions=" + std::to_string(prof.instructions[e]));
    neuron_rt::traceChild(kEngineLabels[e], now, now, std::move(n));
  }
}

}  // namespace

void bindNki(py::module_& m) {
  m.def("_nki_layout", &layoutDict);
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
                                imms.size() == ni * nki::kImmediates,
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
      // The buffers and instructions as buildProgram read them, by field.
      .def("records", &recordsDict)
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
             try {
               py::gil_scoped_release release;
               p.run(ptrs.data());
             } catch (const nki::ProgramError& e) {
               raiseProgramError(e);
             }
           })
      // Queues the run as one work item on the current stream of `device`.
      // `locations`: the kernel lines by location id, so that an error only
      // the data reveals (a device error, raised at the next
      // synchronisation) names the line as well as the kernel.
      .def(
          "launch",
          [](std::shared_ptr<const nki::Program> p,
             const std::vector<int64_t>& addresses, int device,
             const std::string& label, std::vector<std::string> locations) {
            TORCH_CHECK(
                static_cast<int64_t>(addresses.size()) == p->externals(),
                "NKI: the kernel takes ", p->externals(), " tensors, got ",
                addresses.size());
            // While a profile records device items: the kernel's cost
            // model, for its item (set here) and its engines (on the worker).
            std::shared_ptr<const nki::Profile> prof;
            if (tracingItems()) {
              prof = profileForTarget(*p);
              noteKernel(*prof, label);
            }
            launch(static_cast<c10::DeviceIndex>(device), internLabel(label),
                   [p = std::move(p), ptrs = addressesOf(addresses),
                    locations = std::move(locations), prof = std::move(prof)] {
                     try {
                       p->run(ptrs.data());
                     } catch (const nki::ProgramError& e) {
                       const int32_t loc = e.loc();
                       const bool known = loc >= 0 && static_cast<size_t>(loc) <
                                                          locations.size();
                       throw std::runtime_error(
                           (known ? locations[loc] + ": " : std::string()) +
                           e.what());
                     }
                     // (An item queued before the profile began has no
                     // figures of its own: the program's, for trn2.)
                     if (neuron_rt::tracingRunningItem())
                       traceEngines(prof ? *prof : p->profile());
                   });
          },
          py::arg("addresses"), py::arg("device"), py::arg("label"),
          py::arg("locations") = std::vector<std::string>())
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
