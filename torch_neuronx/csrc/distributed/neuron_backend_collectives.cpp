// neuron_backend_*.cpp: one class, a file per concern (they sort together).
// This one: the collectives (all-reduce, broadcast, reduce, all-gather,
// reduce-scatter, all-to-all, gather, scatter, barrier) and their
// *_coalesced forms.
#include "distributed/neuron_backend_impl.h"

namespace torch_neuronx {

using namespace backend_impl;

namespace {

// The *_coalesced calls that have no flat form of their own: each
// (output, input) pair is its own collective, queued in order on the
// communication stream, so the work returned, the last one's, completes
// after all of them (empty lists: a null work). `mismatch` says what the
// lists must be when their lengths differ.
template <typename Output, typename Input, typename One>
c10::intrusive_ptr<c10d::Work> eachPair(std::vector<Output>& outputs,
                                        std::vector<Input>& inputs,
                                        const char* mismatch, One one) {
  TORCH_CHECK(outputs.size() == inputs.size(), "neuron backend: ", mismatch);
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = one(outputs[i], inputs[i]);
  return last;
}

}  // namespace

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
  return eachPair(outputs, inputs,
                  "allgather_coalesced needs one output list per input",
                  [&](std::vector<at::Tensor>& output, at::Tensor& input) {
                    std::vector<std::vector<at::Tensor>> o{output};
                    std::vector<at::Tensor> in{input};
                    return allgather(o, in, opts);
                  });
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return eachPair(
      outputs, inputs,
      "allgather_into_tensor_coalesced needs as many outputs as inputs",
      [&](at::Tensor& output, at::Tensor& input) {
        return _allgather_base(output, input, opts);
      });
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
  return eachPair(
      outputs, inputs,
      "reduce_scatter_tensor_coalesced needs as many outputs as inputs",
      [&](at::Tensor& output, at::Tensor& input) {
        return _reduce_scatter_base(output, input, opts);
      });
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

}  // namespace torch_neuronx
