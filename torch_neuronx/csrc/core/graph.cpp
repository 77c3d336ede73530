#include "core/graph.h"

#include <c10/core/Event.h>
#include <c10/util/Exception.h>
#include <neuron_runtime/captured_work.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/stream.h"

namespace torch_neuronx {
namespace {

std::atomic<uint64_t> g_next_id{1};

}  // namespace

NeuronGraph::NeuronGraph()
    : id_(g_next_id.fetch_add(1)),
      label_(internLabel("neuron graph " + std::to_string(id_))) {}

NeuronGraph::~NeuronGraph() {
  try {
    if (capturing_) runtimeStream(*capturing_).endCapture();
  } catch (...) {
    // An invalidated capture: nothing to keep.
  }
  capturing_.reset();
  try {
    reset();
  } catch (...) {
    // Destruction must not throw.
  }
}

void NeuronGraph::captureBegin() {
  TORCH_CHECK(!capturing_, "this NeuronGraph is already capturing");
  TORCH_CHECK(!work_,
              "this NeuronGraph has already been captured; call reset() "
              "before capturing it again");
  const c10::DeviceIndex device = currentDevice();
  const c10::Stream stream = currentStream(device);
  neuron_rt::Stream& s = runtimeStream(stream);
  TORCH_CHECK(!s.capturing(), "the current stream is already capturing");
  cachingAllocator().openGraphPool(device, id_);
  try {
    s.beginCapture(id_);
  } catch (const std::exception& e) {
    cachingAllocator().releaseGraphPool(device, id_);
    TORCH_CHECK(false, "NeuronGraph capture could not begin: ", e.what());
  }
  capturing_ = stream;
}

void NeuronGraph::captureEnd() {
  TORCH_CHECK(capturing_, "captureEnd() without captureBegin()");
  const c10::Stream stream = *capturing_;
  capturing_.reset();
  std::shared_ptr<neuron_rt::CapturedWork> work;
  try {
    work = runtimeStream(stream).endCapture();
  } catch (const std::exception& e) {
    cachingAllocator().releaseGraphPool(stream.device_index(), id_);
    TORCH_CHECK(false, "NeuronGraph capture failed: ", e.what());
  }
  work_ = std::move(work);
  captured_on_ = stream;
}

void NeuronGraph::replay() {
  TORCH_CHECK(work_, "replay() of a NeuronGraph that has not been captured");
  const c10::DeviceIndex device = captured_on_->device_index();
  const c10::Stream stream = currentStream(device);
  if (stream != *captured_on_ &&
      std::find(replayed_on_.begin(), replayed_on_.end(), stream) ==
          replayed_on_.end())
    replayed_on_.push_back(stream);
  runtimeStream(stream).replay(work_, label_);
  if (launchBlocking()) synchronizeStream(stream);
}

void NeuronGraph::reset() {
  if (!captured_on_) return;
  const c10::Stream home = *captured_on_;
  // The graph's memory is reused on the stream it was captured on: after
  // every replay queued on another stream.
  for (const c10::Stream& other : replayed_on_) {
    c10::Event done(c10::DeviceType::PrivateUse1);
    done.record(other);
    done.block(home);
  }
  replayed_on_.clear();
  work_.reset();
  captured_on_.reset();
  cachingAllocator().releaseGraphPool(home.device_index(), id_);
}

size_t NeuronGraph::numSteps() const { return work_ ? work_->size() : 0; }

bool currentStreamCapturing(c10::DeviceIndex device) {
  return runtimeStream(currentStream(device)).capturing();
}

}  // namespace torch_neuronx
