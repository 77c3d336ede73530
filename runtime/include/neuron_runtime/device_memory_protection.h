// Device memory the host cannot read by accident.
//
// With TORCH_NEURONX_PROTECT_DEVICE_MEMORY=1 the HBM arenas are mapped
// inaccessible (PROT_NONE) except while device work runs, so a host access
// to device memory (a missing synchronize, a device pointer used by host
// code) faults where it happens instead of silently reading whatever is
// there. A SIGSEGV handler, installed with the first protected arena, names
// such a fault: "host access to neuron device memory at 0x... (missing
// synchronize?)", then lets the signal take its course (the previous
// handler, e.g. Python's faulthandler, or the default: the process dies).
//
// mprotect is process-wide, so access is a count: the arenas are open while
// at least one DeviceMemoryAccess exists, in any thread (a stream worker
// opens them for a run of items and closes them when its queue is empty; a
// host path that legitimately touches device memory opens them around it).
// While any device work runs, a stray host access still succeeds: the mode
// catches accesses while the device is idle, the common case of a missing
// synchronize after the work has finished. Opening and closing cost two
// mprotect calls over every arena, proportional to its resident memory,
// which is why the mode is off by default (docs/environment.md).
#pragma once

#include <cstddef>

namespace neuron_rt {

// Whether the mode is on: TORCH_NEURONX_PROTECT_DEVICE_MEMORY ("1" on, "0"
// or unset off), read once, unless setDeviceMemoryProtection() said
// otherwise first. Throws Error(kInvalidConfig) for another value.
bool deviceMemoryProtected();
// Turns the mode on or off; only while no arena exists (tests). Throws
// Error(kInvalidArgument) otherwise.
void setDeviceMemoryProtection(bool on);

// Device memory is accessible while at least one of these exists (no effect
// when the mode is off).
class DeviceMemoryAccess {
 public:
  DeviceMemoryAccess() {
    if (deviceMemoryProtected()) open();
  }
  ~DeviceMemoryAccess() {
    if (deviceMemoryProtected()) close();
  }
  DeviceMemoryAccess(const DeviceMemoryAccess&) = delete;
  DeviceMemoryAccess& operator=(const DeviceMemoryAccess&) = delete;

  // The count itself (the stream worker holds it across items). Only in
  // the mode.
  static void open();
  static void close();
  static bool isOpen();
};

// For HbmArena: a new arena mapped PROT_NONE, made accessible now if access
// is open; its end (before munmap).
void registerProtectedArena(void* base, size_t bytes);
void unregisterProtectedArena(void* base);
// Whether `addr` lies in a protected arena.
bool inProtectedArena(const void* addr);

}  // namespace neuron_rt
