# sm90: host-side TMA tensor maps, and the sm90 forward kernel (compiled for sm_90a; other GPU
# targets get empty stubs). cuda.h comes with the toolkit's include directory; the driver is
# reached at run time through the runtime's entry-point query, so nothing links libcuda.
target_sources(tileattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensor_map.cc ${CMAKE_CURRENT_LIST_DIR}/forward.cu)
# The sm90 forward is selected on sm_90 GPUs when the build has sm_90a code; OFF keeps the sm80
# kernel everywhere (Kernel::kCudaSm90 then reports that the kernel is not in this build).
option(TILEATTN_SM90_FORWARD "Select the sm90 forward kernel on sm_90 GPUs" ON)
if(TILEATTN_SM90_FORWARD AND TILEATTN_CUDA_ARCHITECTURES MATCHES "90a")
  target_compile_definitions(tileattn PRIVATE TILEATTN_SM90_FORWARD)
elseif(TILEATTN_SM90_FORWARD)
  message(STATUS "tileattn: no sm_90a in TILEATTN_CUDA_ARCHITECTURES; the sm90 forward is left out")
endif()
# The sm90 backward (wgmma, TMA, dQ summed in fp32 by bulk reductions), with the CUDA backward.
# Selected only when asked for (Options::kernel = kCudaSm90) until it has passed on an H200.
if(TILEATTN_CUDA_BACKWARD AND TILEATTN_CUDA_ARCHITECTURES MATCHES "90a")
  target_sources(tileattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bwd.cu)
  target_compile_definitions(tileattn PRIVATE TILEATTN_SM90_BACKWARD)
endif()
