// The OpenMP pools of the host's and the device's threads, and why each side
// wants the other's gone.
//
// The simulated core computes with ATen's CPU kernels on its stream workers;
// their parallel regions run on OpenMP thread pools of their own (one per
// master thread). libgomp counts the threads of every pool in the process,
// and once they outnumber the cores it throttles spin-waiting in all pools:
// every parallel region then pays a futex sleep and wake-up.
// - Device side: a host thread that once ran a parallel CPU kernel (building
//   a model on the CPU, say) keeps an idle pool that tips the count; each
//   parallel region of the device paid for it (small GPT: ~1,100 context
//   switches per training step, 5-10% of the step time). The host thread
//   releases its pool whenever it hands work to the device.
// - Host side: a stream worker's pool does the same to the user's own CPU
//   kernels (a 64x64 CPU matmul takes 73-85 us instead of 5 after the device
//   has run one). A worker releases its pool once it has had no work for
//   200 ms (the runtime's worker idle hook); not sooner, as programs that
//   synchronise every step would re-create it each time.
// A thread's next parallel kernel simply starts a new pool.
//
// Small items run on the worker's thread alone. The device borrows the host's
// CPUs, and the host's own thread needs one while it issues work; a parallel
// region over a few thousand elements gains little and makes the worker's
// second OpenMP thread and the issuing host thread take turns on one core
// (small GPT on 2 CPUs: 8-11 ms per training step with parallel small items,
// 4.4-4.8 ms without; CPU eager 6.4-7.6 ms). The choice depends only on the
// item's tensors, never on timing, so results are the same run after run
// (kernels whose rounding depends on the thread count - a LayerNorm's weight
// gradient, a parallel sum - compute small items as a one-thread CPU run
// would). Large items keep every thread (the default GPT's step: 220 ms).
#pragma once

#include <cstdint>

namespace torch_neuronx {

// Items whose largest tensor has fewer elements run on one thread: two
// parallel chunks of ATen's grain size (32768).
constexpr int64_t kSmallItemElements = 65536;

// On a stream worker, inside an item: one thread for the rest of the item
// if its largest tensor is small (each item starts with every thread).
void useOneThreadIfSmall(int64_t largest_numel);

// On a stream worker, inside an item: one thread for the rest of the item,
// whatever its size — for copies of host data in (memory-bound: a second
// thread gains little, and its pool spins against the host thread that is
// producing the next item's data; eager/random_op.cpp).
void useOneThread();

// Releases the calling thread's idle OpenMP pool, if it has one. Cheap when
// it has none (a thread-local check inside the OpenMP runtime); does nothing
// inside a parallel region or where the OpenMP runtime lacks
// omp_pause_resource_all.
void releaseThreadComputePool();

}  // namespace torch_neuronx
