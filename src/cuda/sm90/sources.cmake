# sm90: host-side TMA tensor maps, and the sm90 forward kernel (compiled for sm_90a; other GPU
# targets get empty stubs). cuda.h comes with the toolkit's include directory; the driver is
# reached at run time through the runtime's entry-point query, so nothing links libcuda.
target_sources(tileattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensor_map.cc ${CMAKE_CURRENT_LIST_DIR}/forward.cu)
# The sm90 forward is new: until its GPU tests have passed on an H100/H200 it is compiled but
# not selected. ON makes selection use it on sm_90 GPUs (and lets Kernel::kCudaSm90 ask for it).
option(TILEATTN_SM90_FORWARD "Select the sm90 forward kernel on sm_90 GPUs (being validated)" OFF)
if(TILEATTN_SM90_FORWARD)
  target_compile_definitions(tileattn PRIVATE TILEATTN_SM90_FORWARD)
endif()
