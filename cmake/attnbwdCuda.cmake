# The hand-tuned CUDA fast path (backends/cuda/, issues 5-8), included from the top-level CMakeLists.txt.
#
# Design: plain CUDA C++ in a CUDA-language target of its own, `attnbwd_cuda`, compiled by CMake's CUDA
# support for arch-specific targets (ATTNBWD_CUDA_ARCHITECTURES, default 90a;100a), so Kokkos' arch flags
# and nvcc_wrapper never touch it. It links CUDA::cublasLt and is linked privately into `attnbwd`, which
# then sees ATTNBWD_HAVE_CUDA_FAST_PATH=1. The CUDA runtime comes from the Kokkos CUDA link (the same
# cudart as Kokkos, never a second copy).
#
# Sources are backends/cuda/*.cu. Without any, ATTNBWD_ENABLE_CUDA=ON only checks the configuration
# (Kokkos with CUDA, a CUDA Toolkit new enough for the requested archs) and reports "not yet built".
# Sets, for the package config: ATTNBWD_HAVE_CUDA_FAST_PATH (ON when attnbwd_cuda exists) and
# ATTNBWD_CUDA_TOOLKIT_VERSION (major.minor found, the least a consumer's toolkit may be).
set(ATTNBWD_HAVE_CUDA_FAST_PATH OFF)
set(ATTNBWD_CUDA_TOOLKIT_VERSION "")
if(NOT ATTNBWD_ENABLE_CUDA)
  return()
endif()

if(NOT "CUDA" IN_LIST Kokkos_DEVICES)
  message(FATAL_ERROR "attnbwd: ATTNBWD_ENABLE_CUDA=ON needs a Kokkos built with CUDA "
                      "(Kokkos ${Kokkos_VERSION} from ${Kokkos_DIR} has: ${Kokkos_DEVICES})")
endif()
foreach(_arch IN LISTS ATTNBWD_CUDA_ARCHITECTURES)
  if(NOT _arch MATCHES "^(90a|100a)$")
    message(FATAL_ERROR "attnbwd: the CUDA fast path is written for sm_90a and sm_100a only; "
                        "ATTNBWD_CUDA_ARCHITECTURES='${ATTNBWD_CUDA_ARCHITECTURES}'. Other GPUs use the "
                        "portable path: configure with ATTNBWD_ENABLE_CUDA=OFF.")
  endif()
endforeach()
if(ATTNBWD_CUDA_ARCHITECTURES STREQUAL "")
  message(FATAL_ERROR "attnbwd: ATTNBWD_CUDA_ARCHITECTURES is empty")
endif()

# sm_90a needs CUDA 12.0, sm_100a needs 12.8.
set(_attnbwd_cuda_min 12.0)
if("100a" IN_LIST ATTNBWD_CUDA_ARCHITECTURES)
  set(_attnbwd_cuda_min 12.8)
endif()
find_package(CUDAToolkit ${_attnbwd_cuda_min} REQUIRED)
set(ATTNBWD_CUDA_TOOLKIT_VERSION "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")

file(GLOB _attnbwd_cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/cuda/*.cu)
if(NOT _attnbwd_cuda_sources)
  message(STATUS "attnbwd: CUDA fast path: not yet built (no sources in backends/cuda); "
                 "CUDA Toolkit ${CUDAToolkit_VERSION}, the portable path serves CUDA spaces")
  return()
endif()

# The CUDA compiler is nvcc itself, with the same host compiler as the rest of the build. Kokkos 3.4's
# nvcc_wrapper as CMAKE_CXX_COMPILER is not a valid host compiler for it.
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER MATCHES "nvcc_wrapper")
  set(CMAKE_CUDA_HOST_COMPILER "${Kokkos_CXX_COMPILER}")
  if(NOT CMAKE_CUDA_HOST_COMPILER OR CMAKE_CUDA_HOST_COMPILER MATCHES "nvcc_wrapper")
    set(CMAKE_CUDA_HOST_COMPILER "$ENV{NVCC_WRAPPER_DEFAULT_COMPILER}")
  endif()
  if(NOT CMAKE_CUDA_HOST_COMPILER)
    unset(CMAKE_CUDA_HOST_COMPILER)
  endif()
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
  set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
endif()
enable_language(CUDA)

add_library(attnbwd_cuda STATIC ${_attnbwd_cuda_sources})
set_target_properties(attnbwd_cuda PROPERTIES
  CUDA_ARCHITECTURES "${ATTNBWD_CUDA_ARCHITECTURES}"
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_RUNTIME_LIBRARY None
  POSITION_INDEPENDENT_CODE ON)
target_include_directories(attnbwd_cuda PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR}/backends)
# Line tables for device code (ncu's source counters attribute instructions and stalls to source lines);
# -lineinfo changes no generated instruction.
option(ATTNBWD_CUDA_LINEINFO "Compile the CUDA fast path with -lineinfo" ON)
if(ATTNBWD_CUDA_LINEINFO)
  target_compile_options(attnbwd_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
endif()
target_link_libraries(attnbwd_cuda PUBLIC CUDA::cublasLt)
target_link_libraries(attnbwd PRIVATE attnbwd_cuda)
target_compile_definitions(attnbwd PRIVATE ATTNBWD_HAVE_CUDA_FAST_PATH=1)
set(ATTNBWD_HAVE_CUDA_FAST_PATH ON)
message(STATUS "attnbwd: CUDA fast path: attnbwd_cuda for ${ATTNBWD_CUDA_ARCHITECTURES} "
               "(CUDA Toolkit ${CUDAToolkit_VERSION})")
