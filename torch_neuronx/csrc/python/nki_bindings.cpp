// Bindings of the NKI simulator: torch_neuronx.nki traces a kernel into flat
// records, builds a _NkiProgram from them (checked, planned and timed by the
// runtime's simulator), and runs it (nki/kernel_launch.h) on host memory
// (NumPy arrays, CPU tensors) or as ONE work item on a neuron stream. Only
// argument and error conversion here.
// _nki_layout() hands the front end the records' layout and codes
// (records.h, program.h, dtype.h), which it takes rather than restates.
#include <neuron_runtime/nki/cost_model.h>
#include <neuron_runtime/nki/dtype.h>
#include <neuron_runtime/nki/program.h>
#include <neuron_runtime/nki/records.h>
#include <pybind11/numpy.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "eager/op_stats.h"
#include "nki/kernel_launch.h"
#include "python/target_caster.h"

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
  for (int k = 0; k < n; ++k) {
    const std::string s = name(static_cast<Enum>(k));
    if (s != "?") d[s.c_str()] = k;  // a code no op has (yet)
  }
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

}  // namespace

void bindNki(py::module_& m) {
  m.def("_nki_layout", &layoutDict);
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
             const std::vector<void*> ptrs = addressesOf(addresses);
             try {
               py::gil_scoped_release release;
               runKernelOnHost(p, ptrs);
             } catch (const nki::ProgramError& e) {
               raiseProgramError(e);
             }
           })
      // run_host, then the cost model's estimate on `target` of the
      // instructions the run executed (a program with run-time loops:
      // control_flow.h).
      .def(
          "run_host_profiled",
          [](const nki::Program& p, const std::vector<int64_t>& addresses,
             neuron_rt::Target target) {
            const std::vector<void*> ptrs = addressesOf(addresses);
            std::vector<int32_t> path;
            nki::Profile q;
            try {
              py::gil_scoped_release release;
              TORCH_CHECK(ptrs.size() == static_cast<size_t>(p.externals()),
                          "NKI: wrong number of kernel addresses");
              p.run(ptrs.data(), &path);
              q = nki::estimateCost(p, nki::costParameters(target), &path);
            } catch (const nki::ProgramError& e) {
              raiseProgramError(e);
            }
            q.sbuf_high_water = p.profile().sbuf_high_water;
            q.psum_high_water = p.profile().psum_high_water;
            return profileDict(q);
          },
          py::arg("addresses"), py::arg("target") = neuron_rt::kDefaultTarget)
      // Queues the run as one work item on the current stream of `device`;
      // `locations`: the kernel lines by location id.
      .def(
          "launch",
          [](std::shared_ptr<const nki::Program> p,
             const std::vector<int64_t>& addresses, int device,
             const std::string& label, std::vector<std::string> locations) {
            launchKernel(std::move(p), addressesOf(addresses),
                         static_cast<c10::DeviceIndex>(device), label,
                         std::move(locations));
          },
          py::arg("addresses"), py::arg("device"), py::arg("label"),
          py::arg("locations") = std::vector<std::string>())
      // The cost model's estimate on `target` (a name of the hardware table).
      .def(
          "profile",
          [](const nki::Program& p, neuron_rt::Target target) {
            return profileDict(kernelProfile(p, target));
          },
          py::arg("target") = neuron_rt::kDefaultTarget);
}

}  // namespace torch_neuronx
