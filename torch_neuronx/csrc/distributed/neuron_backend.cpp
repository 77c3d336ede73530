#include "distributed/neuron_backend.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "core/device.h"
#include "core/stream.h"
#include "distributed/backend_options.h"
#include "distributed/comm_types.h"
#include "distributed/neuron_work.h"
#include "distributed/transport.h"
#include "profiler/device_timeline.h"

namespace torch_neuronx {

namespace coll = neuron_rt::collectives;

struct NeuronBackend::Pending {
  std::vector<coll::Communicator::P2POp> ops;
  std::vector<at::Tensor> tensors;
};

namespace {

constexpr char kCommNameKey[] = "neuron_communicator_name";

std::string uniqueName() {
  std::random_device rd;
  std::ostringstream s;
  s << "pg" << ::getpid() << "-" << std::hex << rd() << rd();
  return s.str();
}

[[noreturn]] void distError(const std::string& msg) {
  C10_THROW_ERROR(DistBackendError, msg);
}

// `t` itself when contiguous, else a contiguous copy the collective works on.
at::Tensor contiguousOrCopy(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

char* ptr(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

size_t nbytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

CommElement reducible(const at::Tensor& t) {
  auto e = reducibleAs(t.scalar_type());
  if (!e)
    distError(c10::str("neuron backend: cannot reduce tensors of dtype ",
                       t.scalar_type()));
  return *e;
}

// PREMUL_SUM's factor: a double, or a tensor read by the item (as float64,
// converted on the caller's stream before the collective).
struct Factor {
  double value = 1.0;
  at::Tensor tensor;  // float64, one element, on the device
  double get() const {
    return tensor.defined() ? *static_cast<const double*>(tensor.data_ptr())
                            : value;
  }
};

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

// An output the collective writes through `stand_in`, its contiguous version
// (contiguousOrCopy): copied back unless they are the same tensor.
CopyBacks copyBackIfStaged(const at::Tensor& output,
                           const at::Tensor& stand_in) {
  CopyBacks c;
  if (!stand_in.is_same(output)) c.emplace_back(output, stand_in);
  return c;
}

// Outputs filled from consecutive pieces of the flat buffer `buf`.
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

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "neuron backend: ", what,
              " takes exactly one tensor per process (got ", tensors.size(),
              "); use one process per device");
}

}  // namespace

namespace {

// Joins the shared-memory communicator of `size` ranks agreeing on its name
// through `store` key `key` (rank 0 makes one up).
std::unique_ptr<Transport> joinSharedMemory(
    const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
    int rank, int size, std::chrono::milliseconds timeout,
    const std::string& group_name) {
  std::string name;
  if (rank == 0) {
    name = uniqueName();
    store->set(key, std::vector<uint8_t>(name.begin(), name.end()));
  } else {
    auto bytes = store->get(key);
    name.assign(bytes.begin(), bytes.end());
  }
  coll::CommOptions options;
  options.timeout = timeout;
  try {
    return sharedMemoryTransport(
        coll::Communicator::create(name, rank, size, options));
  } catch (const coll::CollectiveError& e) {
    distError(c10::str("neuron backend: group '", group_name, "' rank ", rank,
                       " of ", size, " could not join: ", e.what()));
  }
}

}  // namespace

NeuronBackend::NeuronBackend(const c10::intrusive_ptr<c10d::Store>& store,
                             int rank, int size,
                             std::chrono::milliseconds timeout,
                             std::string group_name, HostSpan hosts,
                             std::vector<int> global_ranks)
    : c10d::Backend(rank, size),
      rank_(rank),
      size_(size),
      group_name_(std::move(group_name)),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout),
      store_(store),
      pending_(std::make_unique<Pending>()) {
  if (!hosts.spansHosts()) {
    transport_ =
        joinSharedMemory(store, kCommNameKey, rank, size, timeout, group_name_);
    return;
  }
  spans_hosts_ = true;
  gloo_all_ = hosts.all;
  host_of_rank_ = hosts.host_of_rank;
  const std::vector<int>& host_of = host_of_rank_;
  TORCH_CHECK(static_cast<int>(host_of.size()) == size,
              "neuron backend: host_of_rank has ", host_of.size(),
              " entries for ", size, " ranks");
  int local_rank = 0, local_size = 0;
  for (int r = 0; r < size; ++r) {
    if (host_of[r] != host_of[rank]) continue;
    if (r < rank) ++local_rank;
    ++local_size;
  }
  int n_hosts = 0;
  for (int h : host_of) n_hosts = std::max(n_hosts, h + 1);
  const bool several_on_a_host = n_hosts < size;
  auto all = glooTransport(std::move(hosts.all), rank, size);
  if (!several_on_a_host) {
    // One rank per host: gloo carries the group.
    transport_ = std::move(all);
    return;
  }
  std::unique_ptr<Transport> local;
  if (local_size > 1)
    local =
        joinSharedMemory(store, c10::str(kCommNameKey, "/host", host_of[rank]),
                         local_rank, local_size, timeout, group_name_);
  std::unique_ptr<Transport> leaders;
  if (hosts.leaders)
    leaders = glooTransport(std::move(hosts.leaders), host_of[rank], n_hosts);
  transport_ = hierarchicalTransport(std::move(local), std::move(leaders),
                                     std::move(all), host_of, rank);
}

NeuronBackend::~NeuronBackend() {
  try {
    drain();
  } catch (...) {
    // Destruction must not throw; the errors were the collectives' to raise.
  }
}

void NeuronBackend::drain() {
  if (comm_stream_) {
    try {
      runtimeStream(*comm_stream_).synchronize();
    } catch (...) {
    }
  }
}

void NeuronBackend::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK(timeout.count() > 0,
              "neuron: set_timeout needs a positive timeout, got ",
              timeout.count(), " ms");
  timeout_ = timeout;
  transport_->setTimeout(timeout);
}

c10::intrusive_ptr<c10d::Backend::Options> NeuronBackend::getBackendOptions() {
  auto opts = c10::make_intrusive<NeuronBackendOptions>(timeout_);
  opts->group_name = group_name_;
  for (int r = 0; r < size_; ++r)
    opts->global_ranks_in_group.push_back(static_cast<uint64_t>(globalRank(r)));
  return opts;
}

c10::intrusive_ptr<c10d::Backend> NeuronBackend::split(
    const c10::intrusive_ptr<c10d::Store>& /*store: see below*/,
    const std::vector<int>& ranks, const c10::intrusive_ptr<Options>& opts) {
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;  // not a member of the new group
  // The new group meets on this group's store, under its ranks and how many
  // splits with these ranks came before (all members count them alike). Not
  // on the store c10d passes: c10d names it after the ranks *and* how many
  // groups each process has made, which differs between a rank that was
  // left out of an earlier split_group and one that was not.
  std::string key = "neuron_split/";
  for (int r : ranks) key += c10::str(r, ",");
  key += c10::str("/", split_counts_[ranks]++, "/");
  auto split_store = c10::make_intrusive<c10d::PrefixStore>(key, store_);
  const int group_rank = static_cast<int>(it - ranks.begin());
  const auto timeout =
      opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
  std::string name = opts && !opts->group_name.empty() ? opts->group_name
                                                       : group_name_ + "/split";
  HostSpan hosts;
  if (spans_hosts_) hosts = splitHosts(split_store, ranks);
  std::vector<int> global;  // the new group's ranks in the default group
  for (int r : ranks) global.push_back(globalRank(r));
  auto child = c10::make_intrusive<NeuronBackend>(
      split_store, group_rank, static_cast<int>(ranks.size()), timeout,
      std::move(name), std::move(hosts), std::move(global));
  child->device_ = device_;
  return child;
}

HostSpan NeuronBackend::splitHosts(const c10::intrusive_ptr<c10d::Store>& store,
                                   const std::vector<int>& ranks) {
  // The new group's hosts, numbered by their lowest rank in it, and the
  // (parent) ranks that lead them.
  HostSpan hosts;
  std::map<int, int> number_of_host;
  std::vector<int> leaders;
  for (int r : ranks) {
    auto [entry, fresh] = number_of_host.emplace(
        host_of_rank_[r], static_cast<int>(number_of_host.size()));
    if (fresh) leaders.push_back(r);
    hosts.host_of_rank.push_back(entry->second);
  }
  if (leaders.size() == 1) return {};  // all on one host: shared memory
  // Gloo splits its own group: the child's gloo groups, on their own keys.
  auto gloo_options = gloo_all_->getBackendOptions();
  hosts.all = gloo_all_->split(
      c10::make_intrusive<c10d::PrefixStore>("neuron_gloo/", store), ranks,
      gloo_options);
  if (leaders.size() < ranks.size() &&
      std::find(leaders.begin(), leaders.end(), rank_) != leaders.end())
    hosts.leaders = gloo_all_->split(
        c10::make_intrusive<c10d::PrefixStore>("neuron_gloo_leaders/", store),
        leaders, gloo_options);
  return hosts;
}

std::string NeuronBackend::transportKind() const { return transport_->kind(); }

void NeuronBackend::abort() {
  if (transport_) transport_->abort("abort() called on the process group");
}

void NeuronBackend::shutdown() { drain(); }

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

template <typename Body>
c10::intrusive_ptr<c10d::Work> NeuronBackend::enqueue(
    const char* label, c10d::OpType type, c10::DeviceIndex device,
    const std::vector<at::Tensor>& used, std::vector<at::Tensor> outputs,
    Body body, const CollectiveFacts& facts, CopyBacks copies,
    bool blocks_host) {
  const uint64_t seq = ++seq_;
  const c10::Stream current = currentStream(device);
  // Inside a compiled program (its stream is batching) the collective is a
  // step of the program, in order with its kernels, rather than an item on
  // the comm stream: events would cut the program in pieces.
  const bool in_program = runtimeStream(current).batching();
  const c10::Stream comm = in_program ? current : commStream(device);
  if (!in_program) {
    // After what the caller queued so far.
    c10::Event ready(c10::DeviceType::PrivateUse1);
    ready.record(current);
    ready.block(comm);
  } else if (comm_stream_ && !runtimeStream(*comm_stream_).query()) {
    // A transport runs one collective at a time, in the order queued: after
    // the eager ones still on the comm stream (this cuts the program there).
    c10::Event prior(c10::DeviceType::PrivateUse1);
    prior.record(*comm_stream_);
    prior.block(current);
  }
  for (const at::Tensor& t : used)
    if (t.defined()) t.record_stream(comm);
  for (auto& [to, from] : copies) {
    to.record_stream(comm);
    from.record_stream(comm);
  }
  auto outcome = std::make_shared<CollectiveOutcome>();
  Transport* c = transport_.get();
  std::string prefix = describe(label, seq);
  // Right before the item is queued: the events and copies above queue
  // items of their own. The caller's thread queues it, so the item links to
  // the c10d op that called the backend.
  if (tracingItems()) noteCollective(facts, seq);
  launchOn(comm, label,
           [c, body = std::move(body), outcome, prefix = std::move(prefix)] {
             try {
               body(*c);
             } catch (const std::exception& e) {
               const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
               std::string msg =
                   prefix +
                   (c10_error ? c10_error->what_without_backtrace() : e.what());
               try {
                 distError(msg);
               } catch (...) {
                 outcome->fail(std::current_exception());
               }
               // Poisons the stream; the next sync raises DistBackendError.
               throw neuron_rt::Error(neuron_rt::Status::kCollectiveFailed,
                                      msg);
             }
           });
  if (!copies.empty()) {
    c10::StreamGuard guard(comm);
    for (auto& [to, from] : copies) to.copy_(from);
  }
  auto work = c10::make_intrusive<NeuronWork>(rank_, type, label, seq, comm,
                                              std::move(outputs), outcome,
                                              blocks_host, in_program);
  work->markQueued();
  return work;
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

// ---- collectives

// The collective patterns the estimate knows.
using Shape = neuron_rt::CollectiveShape;

c10::intrusive_ptr<c10d::Work> NeuronBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "allreduce");
  at::Tensor& t = tensors[0];
  const auto device = bindDevice(t, "allreduce");
  const CommElement e = reducible(t);
  const coll::ReduceOp op = commReduceOp(opts.reduceOp, t.scalar_type());
  Factor f = factorOf(opts.reduceOp, device);
  at::Tensor d = contiguousOrCopy(t);
  const size_t count = static_cast<size_t>(d.numel()) * e.per_element;
  char* p = ptr(d);
  return enqueue(
      "c10d::allreduce", c10d::OpType::ALLREDUCE, device, {d, f.tensor}, {t},
      [=](Transport& c) { c.allReduce(p, p, count, e.dtype, op, f.get()); },
      CollectiveFacts{"all_reduce", Shape::kAllReduce, double(nbytes(d)), -1,
                      t.scalar_type(), opts.reduceOp.op_},
      copyBackIfStaged(t, d));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(),
              "neuron backend: allreduce_coalesced needs "
              "at least one tensor");
  const auto device = bindDevice(tensors[0], "allreduce_coalesced");
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) {
    bindDevice(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "neuron backend: allreduce_coalesced tensors must have one "
                "dtype, got ",
                tensors[0].scalar_type(), " and ", t.scalar_type());
    flat.push_back(t.reshape(-1));
  }
  const CommElement e = reducible(tensors[0]);
  const coll::ReduceOp op =
      commReduceOp(opts.reduceOp, tensors[0].scalar_type());
  Factor f = factorOf(opts.reduceOp, device);
  at::Tensor buf = at::cat(flat);
  const size_t count = static_cast<size_t>(buf.numel()) * e.per_element;
  char* p = ptr(buf);
  return enqueue(
      "c10d::allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, device,
      {buf, f.tensor}, tensors,
      [=](Transport& c) { c.allReduce(p, p, count, e.dtype, op, f.get()); },
      CollectiveFacts{"all_reduce_coalesced", Shape::kAllReduce,
                      double(nbytes(buf)), -1, buf.scalar_type(),
                      opts.reduceOp.op_},
      unpack(tensors, buf));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  at::Tensor& t = tensors[0];
  const auto device = bindDevice(t, "broadcast");
  at::Tensor d = contiguousOrCopy(t);
  char* p = ptr(d);
  const size_t n = nbytes(d);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(
      "c10d::broadcast", c10d::OpType::BROADCAST, device, {d}, {t},
      [=](Transport& c) { c.broadcast(p, n, coll::DataType::kUInt8, root); },
      CollectiveFacts{"broadcast", Shape::kBroadcast, double(n), -1,
                      t.scalar_type(), std::nullopt, root},
      copyBackIfStaged(t, d));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  at::Tensor& t = tensors[0];
  const auto device = bindDevice(t, "reduce");
  const CommElement e = reducible(t);
  const coll::ReduceOp op = commReduceOp(opts.reduceOp, t.scalar_type());
  Factor f = factorOf(opts.reduceOp, device);
  at::Tensor d = contiguousOrCopy(t);
  const size_t count = static_cast<size_t>(d.numel()) * e.per_element;
  char* p = ptr(d);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(
      "c10d::reduce", c10d::OpType::REDUCE, device, {d, f.tensor}, {t},
      [=](Transport& c) { c.reduce(p, p, count, e.dtype, op, root, f.get()); },
      CollectiveFacts{"reduce", Shape::kReduce, double(nbytes(d)), -1,
                      t.scalar_type(), opts.reduceOp.op_, root},
      rank_ == root ? copyBackIfStaged(t, d) : CopyBacks{});
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  const auto device = bindInputOutput(input, output, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * size_,
              "neuron backend: output tensor size must be equal to "
              "world_size times input tensor size (got ",
              output.numel(), " and ", input.numel(), " x ", size_, ")");
  at::Tensor in = contiguousOrCopy(input);
  at::Tensor out = contiguousOrCopy(output);
  const char* pi = ptr(in);
  char* po = ptr(out);
  const size_t n = nbytes(in);
  return enqueue(
      "c10d::_allgather_base", c10d::OpType::_ALLGATHER_BASE, device, {in, out},
      {output},
      [=](Transport& c) { c.allGather(pi, po, n, coll::DataType::kUInt8); },
      CollectiveFacts{"all_gather", Shape::kAllGather, double(nbytes(out)), -1,
                      input.scalar_type()},
      copyBackIfStaged(output, out));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  checkSingle(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1,
              "neuron backend: allgather takes one "
              "output list per process");
  at::Tensor& input = inputs[0];
  std::vector<at::Tensor>& outs = outputs[0];
  const auto device = bindDevice(input, "allgather");
  TORCH_CHECK(static_cast<int>(outs.size()) == size_,
              "neuron backend: allgather needs world_size (", size_,
              ") output tensors, got ", outs.size());
  for (const at::Tensor& o : outs) {
    bindDevice(o, "allgather");
    TORCH_CHECK(
        o.numel() == input.numel() && o.scalar_type() == input.scalar_type(),
        "neuron backend: allgather output tensors must match the "
        "input's size and dtype (input ",
        input.sizes(), " ", input.scalar_type(), ", output ", o.sizes(), " ",
        o.scalar_type(), ")");
  }
  at::Tensor in = contiguousOrCopy(input);
  at::Tensor buf = at::empty({size_ * input.numel()}, input.options());
  const char* pi = ptr(in);
  char* pb = ptr(buf);
  const size_t n = nbytes(in);
  return enqueue(
      "c10d::allgather", c10d::OpType::ALLGATHER, device, {in, buf}, outs,
      [=](Transport& c) { c.allGather(pi, pb, n, coll::DataType::kUInt8); },
      CollectiveFacts{"all_gather", Shape::kAllGather, double(nbytes(buf)), -1,
                      input.scalar_type()},
      unpack(outs, buf));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "neuron backend: allgather_coalesced needs one output list per "
              "input");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> o{outputs[i]};
    std::vector<at::Tensor> in{inputs[i]};
    last = allgather(o, in, opts);
  }
  return last;
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "neuron backend: allgather_into_tensor_coalesced needs as many "
              "outputs as inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i)
    last = _allgather_base(outputs[i], inputs[i], opts);
  return last;
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  const auto device = bindInputOutput(input, output, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * size_,
              "neuron backend: input tensor must be the same size as output "
              "size times world size (got ",
              input.numel(), " and ", output.numel(), " x ", size_, ")");
  const CommElement e = reducible(output);
  const coll::ReduceOp op = commReduceOp(opts.reduceOp, output.scalar_type());
  Factor f = factorOf(opts.reduceOp, device);
  at::Tensor in = contiguousOrCopy(input);
  at::Tensor out = contiguousOrCopy(output);
  const char* pi = ptr(in);
  char* po = ptr(out);
  const size_t count = static_cast<size_t>(out.numel()) * e.per_element;
  return enqueue(
      "c10d::_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, device,
      {in, out, f.tensor}, {output},
      [=](Transport& c) {
        c.reduceScatter(pi, po, count, e.dtype, op, f.get());
      },
      CollectiveFacts{"reduce_scatter", Shape::kReduceScatter,
                      double(nbytes(in)), -1, output.scalar_type(),
                      opts.reduceOp.op_},
      copyBackIfStaged(output, out));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "neuron backend: reduce_scatter needs one list of world_size (",
              size_, ") input tensors");
  at::Tensor& output = outputs[0];
  bindDevice(output, "reduce_scatter");
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : inputs[0]) {
    bindDevice(t, "reduce_scatter");
    TORCH_CHECK(
        t.numel() == output.numel() && t.scalar_type() == output.scalar_type(),
        "neuron backend: reduce_scatter input tensors must match the "
        "output's size and dtype");
    flat.push_back(t.reshape(-1));
  }
  at::Tensor buf = at::cat(flat);
  return _reduce_scatter_base(output, buf, opts);
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "neuron backend: reduce_scatter_tensor_coalesced needs as many "
              "outputs as inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i)
    last = _reduce_scatter_base(outputs[i], inputs[i], opts);
  return last;
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  const auto device = bindInputOutput(input, output, "all_to_all_single");
  // Splits are in rows (dim 0); none given: equal parts.
  auto plan = [&](const at::Tensor& t, const std::vector<int64_t>& splits,
                  const char* which, std::vector<size_t>& bytes,
                  std::vector<size_t>& offsets) {
    const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    const size_t row_bytes = rows > 0 ? nbytes(t) / rows : 0;
    std::vector<int64_t> s = splits;
    if (s.empty()) {
      TORCH_CHECK(rows % size_ == 0,
                  "neuron backend: all_to_all_single: ", which, " dim 0 (",
                  rows, ") is not divisible by world size ", size_,
                  " and no split sizes were given");
      s.assign(size_, rows / size_);
    }
    TORCH_CHECK(static_cast<int>(s.size()) == size_,
                "neuron backend: all_to_all_single: ", which,
                " split sizes must have world_size (", size_, ") entries, got ",
                s.size());
    int64_t total = 0;
    size_t off = 0;
    for (int64_t x : s) {
      TORCH_CHECK(x >= 0, "neuron backend: all_to_all_single: negative ", which,
                  " split size ", x);
      bytes.push_back(static_cast<size_t>(x) * row_bytes);
      offsets.push_back(off);
      off += static_cast<size_t>(x) * row_bytes;
      total += x;
    }
    TORCH_CHECK(total == rows, "neuron backend: all_to_all_single: ", which,
                " split sizes sum to ", total, " but dim 0 has ", rows,
                " rows");
  };
  std::vector<size_t> send_bytes, send_offsets, recv_bytes, recv_offsets;
  plan(input, input_split_sizes, "input", send_bytes, send_offsets);
  plan(output, output_split_sizes, "output", recv_bytes, recv_offsets);
  at::Tensor in = contiguousOrCopy(input);
  at::Tensor out = contiguousOrCopy(output);
  const char* pi = ptr(in);
  char* po = ptr(out);
  return enqueue(
      "c10d::alltoall_base", c10d::OpType::ALLTOALL_BASE, device, {in, out},
      {output},
      [=](Transport& c) {
        c.allToAllV(pi, send_bytes, send_offsets, po, recv_bytes, recv_offsets);
      },
      CollectiveFacts{"all_to_all", Shape::kAllToAll, double(nbytes(in)), -1,
                      input.scalar_type()},
      copyBackIfStaged(output, out));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              "neuron backend: all_to_all needs world_size (", size_,
              ") input and output tensors, got ", inputs.size(), " and ",
              outputs.size());
  const auto device = bindDevice(inputs[0], "all_to_all");
  std::vector<at::Tensor> flat_in;
  std::vector<size_t> send_bytes, send_offsets, recv_bytes, recv_offsets;
  size_t off = 0;
  for (const at::Tensor& t : inputs) {
    bindDevice(t, "all_to_all");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(),
                "neuron backend: all_to_all tensors must have one dtype");
    flat_in.push_back(t.reshape(-1));
    send_bytes.push_back(nbytes(t));
    send_offsets.push_back(off);
    off += nbytes(t);
  }
  int64_t out_numel = 0;
  off = 0;
  for (const at::Tensor& t : outputs) {
    bindDevice(t, "all_to_all");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(),
                "neuron backend: all_to_all tensors must have one dtype");
    recv_bytes.push_back(nbytes(t));
    recv_offsets.push_back(off);
    off += nbytes(t);
    out_numel += t.numel();
  }
  at::Tensor in = at::cat(flat_in);
  at::Tensor out = at::empty({out_numel}, outputs[0].options());
  const char* pi = ptr(in);
  char* po = ptr(out);
  return enqueue(
      "c10d::alltoall", c10d::OpType::ALLTOALL, device, {in, out}, outputs,
      [=](Transport& c) {
        c.allToAllV(pi, send_bytes, send_offsets, po, recv_bytes, recv_offsets);
      },
      CollectiveFacts{"all_to_all", Shape::kAllToAll, double(nbytes(in)), -1,
                      inputs[0].scalar_type()},
      unpack(outputs, out));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  checkSingle(inputs, "gather");
  const at::Tensor& input = inputs[0];
  const auto device = bindDevice(input, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = rank_ == root;
  if (is_root) {
    TORCH_CHECK(
        outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
        "neuron backend: gather needs world_size (", size_,
        ") output tensors on the root");
    for (const at::Tensor& o : outputs[0]) {
      bindDevice(o, "gather");
      TORCH_CHECK(
          o.numel() == input.numel() && o.scalar_type() == input.scalar_type(),
          "neuron backend: gather output tensors must match the "
          "input's size and dtype");
    }
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                "neuron backend: gather takes output tensors on the root "
                "only");
  }
  at::Tensor in = contiguousOrCopy(input);
  at::Tensor buf = is_root ? at::empty({size_ * input.numel()}, input.options())
                           : at::Tensor();
  const char* pi = ptr(in);
  char* pb = is_root ? ptr(buf) : nullptr;
  const std::vector<size_t> counts(size_, nbytes(in));
  std::vector<at::Tensor> outs =
      is_root ? outputs[0] : std::vector<at::Tensor>{};
  return enqueue(
      "c10d::gather", c10d::OpType::GATHER, device, {in, buf}, outs,
      [=](Transport& c) {
        c.gatherV(pi, pb, counts, coll::DataType::kUInt8, root);
      },
      // Estimated as an all-gather of the root's result: every rank's piece
      // crosses the links to the root.
      CollectiveFacts{"gather", Shape::kAllGather,
                      double(is_root ? size_ * nbytes(in) : nbytes(in)),
                      double(size_ * nbytes(in)), input.scalar_type(),
                      std::nullopt, root},
      is_root ? unpack(outs, buf) : CopyBacks{});
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkSingle(outputs, "scatter");
  at::Tensor& output = outputs[0];
  const auto device = bindDevice(output, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = rank_ == root;
  at::Tensor buf;
  if (is_root) {
    TORCH_CHECK(
        inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
        "neuron backend: scatter needs world_size (", size_,
        ") input tensors on the root");
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : inputs[0]) {
      bindDevice(t, "scatter");
      TORCH_CHECK(t.numel() == output.numel() &&
                      t.scalar_type() == output.scalar_type(),
                  "neuron backend: scatter input tensors must match the "
                  "output's size and dtype");
      flat.push_back(t.reshape(-1));
    }
    buf = at::cat(flat);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                "neuron backend: scatter takes input tensors on the root "
                "only");
  }
  at::Tensor out = contiguousOrCopy(output);
  const char* pb = is_root ? ptr(buf) : nullptr;
  char* po = ptr(out);
  const std::vector<size_t> counts(size_, nbytes(out));
  return enqueue(
      "c10d::scatter", c10d::OpType::SCATTER, device, {buf, out}, {output},
      [=](Transport& c) {
        c.scatterV(pb, po, counts, coll::DataType::kUInt8, root);
      },
      // Estimated as the gather's mirror image.
      CollectiveFacts{"scatter", Shape::kAllGather,
                      double(is_root ? size_ * nbytes(out) : nbytes(out)),
                      double(size_ * nbytes(out)), output.scalar_type(),
                      std::nullopt, root},
      copyBackIfStaged(output, out));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::send(
    std::vector<at::Tensor>& tensors, int dst, int tag) {
  checkSingle(tensors, "send");
  const auto device = bindDevice(tensors[0], "send");
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_,
              "neuron backend: send to invalid rank ", dst);
  at::Tensor d = contiguousOrCopy(tensors[0]);
  if (coalescing_) {
    pending_->ops.push_back({true, dst, ptr(d), nbytes(d), tag});
    pending_->tensors.push_back(d);
    return c10::make_intrusive<c10d::Work>();
  }
  const char* p = ptr(d);
  const size_t n = nbytes(d);
  return enqueue(
      "c10d::send", c10d::OpType::SEND, device, {d}, {},
      [=](Transport& c) { c.send(p, n, dst, tag); },
      CollectiveFacts{"send", Shape::kPointToPoint, double(n), -1,
                      d.scalar_type(), std::nullopt, -1, dst});
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::recv(
    std::vector<at::Tensor>& tensors, int src, int tag) {
  checkSingle(tensors, "recv");
  at::Tensor& t = tensors[0];
  const auto device = bindDevice(t, "recv");
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_,
              "neuron backend: recv from invalid rank ", src);
  at::Tensor d = contiguousOrCopy(t);
  if (coalescing_) {
    TORCH_CHECK(d.is_same(t),
                "neuron backend: batched recv needs a "
                "contiguous tensor");
    pending_->ops.push_back({false, src, ptr(d), nbytes(d), tag});
    pending_->tensors.push_back(d);
    return c10::make_intrusive<c10d::Work>();
  }
  char* p = ptr(d);
  const size_t n = nbytes(d);
  return enqueue(
      "c10d::recv", c10d::OpType::RECV, device, {d}, {t},
      [=](Transport& c) { c.recv(p, n, src, tag); },
      CollectiveFacts{"recv", Shape::kPointToPoint, double(n), -1,
                      t.scalar_type(), std::nullopt, -1, src},
      copyBackIfStaged(t, d));
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::barrier(
    const c10d::BarrierOptions& opts) {
  c10::DeviceIndex device = boundOrCurrentDevice();
  if (opts.device && opts.device->type() == c10::DeviceType::PrivateUse1)
    device = opts.device->index();
  else if (!opts.device_ids.empty())
    device = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
  // The host waits for a barrier (as with NCCL).
  return enqueue(
      "c10d::barrier", c10d::OpType::BARRIER, device, {}, {},
      [](Transport& c) { c.barrier(); },
      CollectiveFacts{"barrier", Shape::kBarrier}, {}, /*blocks_host=*/true);
}

void NeuronBackend::startCoalescing() {
  coalescing_ = true;
  pending_ = std::make_unique<Pending>();
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::endCoalescing() {
  coalescing_ = false;
  std::unique_ptr<Pending> p = std::move(pending_);
  pending_ = std::make_unique<Pending>();
  const c10::DeviceIndex device = boundOrCurrentDevice();
  // c10d ends the block from Python, not through an op: this host event is
  // what the profiler links the item to.
  RECORD_FUNCTION(
      p->ops.empty() ? "c10d::coalesced" : "c10d::batch_isend_irecv",
      std::vector<c10::IValue>());
  if (p->ops.empty()) {
    // Collectives in the block were queued as they came: the returned work
    // completes after the last of them.
    return enqueue(
        "c10d::coalesced", c10d::OpType::COALESCED, device, {}, {},
        [](Transport&) {}, CollectiveFacts::nothing("coalesced"));
  }
  auto ops = std::move(p->ops);
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].is_send) outs.push_back(p->tensors[i]);
  CollectiveFacts facts{"batch_isend_irecv", Shape::kPointToPoint};
  facts.p2p = &ops;
  return enqueue(
      "c10d::batch_isend_irecv", c10d::OpType::COALESCED, device, p->tensors,
      outs, [ops](Transport& c) { c.exchange(ops); }, facts);
}

}  // namespace torch_neuronx
