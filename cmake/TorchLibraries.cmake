# torch_neuronx::torch — the installed torch as an imported interface target:
# headers, the definitions they are compiled with, and the CPU-side libraries
# (c10, torch_cpu); torch_neuronx::torch_python adds torch_python, for the
# Python bindings only (the backend library links no Python). Works against CPU and CUDA builds of torch
# alike and needs no CUDA toolkit: see torch_build_info.py for why torch's own
# CMake package is not used.
#
# Sets TORCH_VERSION, TORCH_INSTALL_PREFIX, TORCH_LIBRARY_DIR (and the others
# torch_build_info.py prints) in the caller's scope.
if(TARGET torch_neuronx::torch)
  return()
endif()

execute_process(
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/torch_build_info.py
  OUTPUT_VARIABLE _torch_facts
  RESULT_VARIABLE _torch_facts_rc
  ERROR_VARIABLE _torch_facts_err)
if(NOT _torch_facts_rc EQUAL 0)
  message(FATAL_ERROR
    "torch-neuronx builds against an installed torch, and ${Python3_EXECUTABLE} "
    "could not import one:\n${_torch_facts_err}\n"
    "Install torch 2.13 or 2.14 first (scripts/setup.sh does), then build with "
    "`pip install --no-build-isolation -e .`.")
endif()
file(WRITE ${CMAKE_BINARY_DIR}/torch_build_info.cmake "${_torch_facts}")
include(${CMAKE_BINARY_DIR}/torch_build_info.cmake)
# Re-configure when another torch is installed into the same interpreter.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${TORCH_INSTALL_PREFIX}/version.py ${CMAKE_CURRENT_LIST_DIR}/torch_build_info.py)

set(_torch_supported_min 2.13)
set(_torch_supported_below 2.15)
if(TORCH_VERSION VERSION_LESS _torch_supported_min
   OR NOT TORCH_VERSION VERSION_LESS _torch_supported_below)
  message(WARNING
    "torch ${TORCH_VERSION_FULL} is outside the versions torch-neuronx supports "
    "(>= ${_torch_supported_min}, < ${_torch_supported_below}); building anyway. "
    "docs/development.md says how a new torch version is brought in.")
endif()

add_library(torch_neuronx::torch INTERFACE IMPORTED)
# SYSTEM: torch's headers are not ours to warn about. kineto/: Kineto's plugin
# interface (IActivityProfiler.h), shipped with torch.
target_include_directories(torch_neuronx::torch SYSTEM INTERFACE
  ${TORCH_INCLUDE_DIRS} ${TORCH_INSTALL_PREFIX}/include/kineto)
target_compile_definitions(torch_neuronx::torch INTERFACE ${TORCH_COMPILE_DEFINITIONS})
# Paths, not find_library(): its cache would keep an earlier torch's paths.
add_library(torch_neuronx::torch_python INTERFACE IMPORTED)
target_link_libraries(torch_neuronx::torch_python INTERFACE torch_neuronx::torch)
foreach(_lib c10 torch_cpu torch_python)
  set(_path ${TORCH_LIBRARY_DIR}/lib${_lib}.so)
  if(NOT EXISTS ${_path})
    message(FATAL_ERROR "torch ${TORCH_VERSION_FULL} has no ${_path}")
  endif()
  if(_lib STREQUAL "torch_python")
    target_link_libraries(torch_neuronx::torch_python INTERFACE ${_path})
  else()
    target_link_libraries(torch_neuronx::torch INTERFACE ${_path})
  endif()
endforeach()
message(STATUS "torch ${TORCH_VERSION_FULL} at ${TORCH_INSTALL_PREFIX}")
