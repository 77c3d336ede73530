// Micro-benchmark of the shared-memory communicator (not a test): prints
// all_reduce bus bandwidth (NCCL's definition: bytes * 2(n-1)/n / time) for
// 2 and 4 forked ranks, next to single-core memcpy bandwidth measured in the
// same run, so the ratios can be quoted. Each figure is the best of three
// runs; the ranks are forked processes, as in a real job.
//
//   collectives_bench [max_mib=64]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "neuron_runtime/collectives/communicator.h"

using namespace neuron_rt::collectives;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Bytes copied per second by one core, for a buffer of `bytes`.
double memcpyBandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const int iters = bytes >= (size_t{16} << 20) ? 10 : 200;
  std::memcpy(b.data(), a.data(), bytes);
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    std::memcpy(b.data(), a.data(), bytes);
    a[i % bytes] = b[(i * 7) % bytes];
  }
  return double(bytes) * iters / seconds(t0, Clock::now());
}

void runRank(int rank, int n, const std::string& name, size_t bytes,
             int pipe_fd) {
  auto comm = Communicator::create(name, rank, n);
  const size_t count = std::max<size_t>(1, bytes / 4);
  std::vector<float> buf(count, 1.0f);
  const int iters = bytes <= 4096 ? 20000 : bytes <= (1 << 20) ? 200 : 10;
  for (int i = 0; i < 3; ++i)
    comm->allReduce(buf.data(), buf.data(), count, DataType::kFloat32,
                    ReduceOp::kSum);
  comm->barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i)
    comm->allReduce(buf.data(), buf.data(), count, DataType::kFloat32,
                    ReduceOp::kSum);
  comm->barrier();
  double per_op = seconds(t0, Clock::now()) / iters;
  if (rank == 0 && write(pipe_fd, &per_op, sizeof per_op) != sizeof per_op)
    std::perror("write");
}

// Seconds per all_reduce of `bytes` with `n` ranks (rank 0's view).
double timeAllReduce(int n, size_t bytes) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const std::string name = "bench-" + std::to_string(getpid()) + "-" +
                           std::to_string(n) + "-" + std::to_string(bytes);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      try {
        runRank(r, n, name, bytes, fds[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d (%d ranks, %zu bytes): %s\n", r, n, bytes,
                     e.what());
        _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(fds[1]);
  double per_op = -1;
  if (read(fds[0], &per_op, sizeof per_op) != sizeof per_op) per_op = -1;
  close(fds[0]);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  return per_op;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t max_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  double mc = 0;
  for (int rep = 0; rep < 3; ++rep)
    mc = std::max(mc, memcpyBandwidth(max_mib << 20));
  std::printf("single-core memcpy (%zu MiB): %.2f GB/s\n", max_mib, mc / 1e9);
  std::printf("%-6s %-10s %-12s %-12s %-10s\n", "ranks", "bytes", "time/op",
              "busbw GB/s", "busbw/memcpy");
  for (int n : {2, 4}) {
    for (size_t bytes : {size_t{4}, size_t{1} << 20, max_mib << 20}) {
      // Best of three runs: other load on the machine only ever slows a
      // run down.
      double t = timeAllReduce(n, bytes);
      for (int rep = 0; rep < 2; ++rep) {
        const double u = timeAllReduce(n, bytes);
        if (u > 0 && (t <= 0 || u < t)) t = u;
      }
      const double bus = double(bytes) * 2.0 * (n - 1) / n / t;
      std::printf("%-6d %-10zu %9.2f us %-12.2f %.2f\n", n, bytes, t * 1e6,
                  bus / 1e9, bus / mc);
    }
  }
  return 0;
}
