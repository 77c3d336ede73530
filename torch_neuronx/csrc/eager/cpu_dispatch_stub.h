// Calling ATen's CPU dispatch stubs (at::native::DispatchStub) from this
// library, for kernels of our own that run ATen's vectorised CPU loops on
// device memory.
//
// DispatchStub.h declares its out-of-line selector with one parameter per
// CPU capability the torch build has, behind HAVE_<CAP>_CPU_DEFINITION
// macros that torch's own build sets and its installed headers do not. This
// header sets them as the x86_64 wheels were built (DEFAULT, AVX512, AVX2:
// libtorch_cpu exports DispatchStubImpl::get_call_ptr(DeviceType, void*,
// void*, void*)), so stub calls link and dispatch exactly as ATen's do,
// honouring ATEN_CPU_CAPABILITY. Include it before anything that includes
// DispatchStub.h. Other platforms' wheels have other capability lists:
// there, kernels built on stubs are left out (TORCH_NEURONX_HAS_CPU_STUBS
// is 0) and their ops keep the generic path.
#pragma once

#if defined(__x86_64__) && !defined(HAVE_AVX2_CPU_DEFINITION)
#ifdef DECLARE_DISPATCH  // DispatchStub.h came first, without the macros
#error "cpu_dispatch_stub.h must come before ATen/native/DispatchStub.h"
#endif
#define HAVE_AVX512_CPU_DEFINITION
#define HAVE_AVX2_CPU_DEFINITION
#endif

#if defined(__x86_64__)
#define TORCH_NEURONX_HAS_CPU_STUBS 1
#else
#define TORCH_NEURONX_HAS_CPU_STUBS 0
#endif

#include <ATen/native/DispatchStub.h>
