// neuron_backend_*.cpp: one class, a file per concern (they sort together).
// This one: set-up (joining the group's transport, construction and
// destruction, options and timeout, splitting into sub-groups, abort).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "distributed/backend_options.h"
#include "distributed/neuron_backend_impl.h"

namespace torch_neuronx {

using namespace backend_impl;

namespace {

constexpr char kCommNameKey[] = "neuron_communicator_name";

std::string uniqueName() {
  std::random_device rd;
  std::ostringstream s;
  s << "pg" << ::getpid() << "-" << std::hex << rd() << rd();
  return s.str();
}

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

}  // namespace torch_neuronx
