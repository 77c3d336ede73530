// The host thread's OpenMP pool, and why the device wants it gone.
//
// The simulated core computes with ATen's CPU kernels on its stream workers;
// their parallel regions run on OpenMP thread pools of their own (one per
// master thread). libgomp counts the threads of every pool in the process,
// and once they outnumber the cores it throttles spin-waiting in all pools:
// each parallel region of the device then pays a futex sleep and wake-up
// (measured on the small GPT: ~1,100 context switches per training step, and
// 5-10% of the step time). A host thread that once ran a parallel CPU kernel
// (building a model on the CPU, say) keeps an idle pool whose only effect is
// to tip that count. Releasing it whenever the host thread hands work to the
// device keeps the device's pools spinning; the host thread's next parallel
// CPU kernel simply starts a new pool.
#pragma once

namespace torch_neuronx {

// Releases the calling thread's idle OpenMP pool, if it has one. Cheap when
// it has none (a thread-local check inside the OpenMP runtime); does nothing
// inside a parallel region or where the OpenMP runtime lacks
// omp_pause_resource_all.
void releaseHostComputePool();

}  // namespace torch_neuronx
