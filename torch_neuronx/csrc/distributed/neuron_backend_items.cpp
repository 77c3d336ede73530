// neuron_backend_*.cpp: one class, a file per concern (they sort together).
// This one: what every call shares on its way to a work item (the device
// the process binds, the communication stream, the failure's prefix, the
// argument helpers of backend_impl) and what the profiler is told of it.
// enqueue itself, a template, is in neuron_backend_impl.h.
#include <algorithm>
#include <sstream>

#include "core/device.h"
#include "distributed/neuron_backend_impl.h"
#include "profiler/device_timeline.h"

namespace torch_neuronx {

namespace backend_impl {

[[noreturn]] void distError(const std::string& msg) {
  C10_THROW_ERROR(DistBackendError, msg);
}

CommElement reducible(const at::Tensor& t) {
  auto e = reducibleAs(t.scalar_type());
  if (!e)
    distError(c10::str("neuron backend: cannot reduce tensors of dtype ",
                       t.scalar_type()));
  return *e;
}

Factor factorOf(const c10d::ReduceOp& op, c10::DeviceIndex device) {
  Factor f;
  f.value = premulDoubleFactor(op);
  if (auto t = premulTensorFactor(op)) {
    TORCH_CHECK(t->numel() == 1,
                "neuron backend: PREMUL_SUM's tensor factor must have one "
                "element, got ",
                t->numel());
    f.tensor =
        t->to(c10::Device(c10::DeviceType::PrivateUse1, device), at::kDouble)
            .contiguous();
  }
  return f;
}

CopyBacks copyBackIfStaged(const at::Tensor& output,
                           const at::Tensor& stand_in) {
  CopyBacks c;
  if (!stand_in.is_same(output)) c.emplace_back(output, stand_in);
  return c;
}

CopyBacks unpack(const std::vector<at::Tensor>& outputs,
                 const at::Tensor& buf) {
  CopyBacks c;
  int64_t offset = 0;
  for (const at::Tensor& t : outputs) {
    c.emplace_back(t, buf.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  return c;
}

bool tracingItems() {
  return neuron_rt::Runtime::initialized() && runtime().trace().enabled();
}

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "neuron backend: ", what,
              " takes exactly one tensor per process (got ", tensors.size(),
              "); use one process per device");
}

}  // namespace backend_impl

namespace {

// The reduce_op= of a collective's note.
const char* reduceOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "sum";
    case c10d::ReduceOp::AVG:
      return "avg";
    case c10d::ReduceOp::PRODUCT:
      return "product";
    case c10d::ReduceOp::MIN:
      return "min";
    case c10d::ReduceOp::MAX:
      return "max";
    case c10d::ReduceOp::BAND:
      return "band";
    case c10d::ReduceOp::BOR:
      return "bor";
    case c10d::ReduceOp::BXOR:
      return "bxor";
    case c10d::ReduceOp::PREMUL_SUM:
      return "premul_sum";
    default:
      return "unused";
  }
}

}  // namespace

c10::DeviceIndex NeuronBackend::bindDevice(const at::Tensor& t,
                                           const char* what) {
  TORCH_CHECK(t.defined(), "neuron backend: ", what, ": undefined tensor");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
              "neuron backend: ", what,
              " takes neuron tensors, got a tensor "
              "on ",
              t.device(),
              " (use a 'cpu:gloo,neuron:neuron' group for "
              "CPU tensors)");
  TORCH_CHECK(t.layout() == c10::kStrided, "neuron backend: ", what,
              " takes dense tensors");
  const c10::DeviceIndex d = t.device().index();
  if (device_ < 0) {
    device_ = d;
  } else if (d != device_) {
    TORCH_CHECK(false, "neuron backend: ", what,
                ": tensor on neuron:", static_cast<int>(d), ", but rank ",
                rank_, " of this group uses neuron:", static_cast<int>(device_),
                ". Each process uses one device: call "
                "torch.neuron.set_device(LOCAL_RANK) and put its tensors "
                "there.");
  }
  return d;
}

c10::DeviceIndex NeuronBackend::bindInputOutput(const at::Tensor& input,
                                                const at::Tensor& output,
                                                const char* what) {
  const c10::DeviceIndex d = bindDevice(input, what);
  bindDevice(output, what);
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "neuron backend: ", what, ": output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  return d;
}

c10::DeviceIndex NeuronBackend::boundOrCurrentDevice() const {
  return device_ >= 0 ? device_ : currentDevice();
}

c10::Stream NeuronBackend::commStream(c10::DeviceIndex device) {
  if (!comm_stream_) comm_stream_ = streamFromPool(device, true);
  return *comm_stream_;
}

std::string NeuronBackend::describe(const char* collective,
                                    uint64_t seq) const {
  return c10::str("neuron backend: ", collective, " (sequence number ", seq,
                  ") in group '", group_name_, "' on rank ", rank_, " of ",
                  size_, " failed: ");
}

// ---- what the profiler is told

int NeuronBackend::globalRank(int group_rank) const {
  if (group_rank < 0 || group_rank >= static_cast<int>(global_ranks_.size()))
    return group_rank;  // the default group
  return global_ranks_[group_rank];
}

void NeuronBackend::noteCollective(const CollectiveFacts& f,
                                   uint64_t seq) const {
  neuron_rt::ItemNote& n = neuron_rt::pendingNote();
  n.category = neuron_rt::ItemCategory::kCollective;
  n.set = true;
  double bytes = f.bytes;
  if (f.p2p) {  // what this rank sends and receives
    bytes = 0;
    for (const auto& op : *f.p2p) bytes += static_cast<double>(op.bytes);
  }
  n.bytes = bytes;
  // The estimate: the group's ring on the topology its global ranks sit on
  // (the function _C._estimate_collective calls), with the device's model.
  if (f.moves_nothing) {
    n.parts = {};
  } else {
    std::vector<int> group(size_);
    for (int r = 0; r < size_; ++r) group[r] = globalRank(r);
    n.parts = neuron_rt::collectiveEstimate(
        f.shape, f.estimate_bytes >= 0 ? f.estimate_bytes : bytes, group,
        profiler::deviceModel());
  }
  n.has_parts = true;
  n.estimate_ns = neuron_rt::roundedNs(n.parts);
  std::ostringstream d;
  d << "op=" << f.op << ";group=" << group_name_
    << ";size=" << static_cast<int64_t>(bytes) << ";ranks=" << size_
    << ";rank=" << globalRank(rank_) << ";group_rank=" << rank_ << ";peers=";
  if (f.p2p) {
    std::vector<int> peers;
    for (const auto& op : *f.p2p) peers.push_back(globalRank(op.peer));
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    for (size_t k = 0; k < peers.size(); ++k) d << (k ? "," : "") << peers[k];
  } else if (f.peer >= 0) {
    d << globalRank(f.peer);
  } else {
    bool first = true;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      d << (first ? "" : ",") << globalRank(r);
      first = false;
    }
  }
  d << ";seq=" << seq;
  if (f.root >= 0) d << ";root=" << globalRank(f.root);
  if (f.dtype) d << ";dtype=" << c10::getDtypeNames(*f.dtype).first;
  if (f.reduce_op) d << ";reduce_op=" << reduceOpName(*f.reduce_op);
  n.detail = std::make_shared<const std::string>(d.str());
}

}  // namespace torch_neuronx
