# The sm80 kernels (every sm_80+ GPU). The forward: one translation unit per head dim, each with
# 2 dtypes x 2 mask policies, so 16 kernels per GPU architecture in all.
target_sources(tileattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/../forward.cc
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim64.cu
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim96.cu
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim128.cu
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim256.cu)

# The backward: the preprocessing, then per head dim 2 dtypes x 2 masks x {dK/dV, dQ} (D = 256:
# dV and dK passes), 8 (12) kernels for 64, 128 and 256. Off by default until its GPU tests have
# passed on a GPU (a build without it says so for CUDA tensors); the release preset and the GPU
# harness turn it on.
option(TILEATTN_CUDA_BACKWARD "Compile the CUDA backward kernels" ON)
if(TILEATTN_CUDA_BACKWARD)
  target_compile_definitions(tileattn PRIVATE TILEATTN_CUDA_BACKWARD)
  target_sources(tileattn PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/../backward.cc
    ${CMAKE_CURRENT_LIST_DIR}/bwd_preprocess.cu
    ${CMAKE_CURRENT_LIST_DIR}/bwd_hdim64.cu
    ${CMAKE_CURRENT_LIST_DIR}/bwd_hdim128.cu
    ${CMAKE_CURRENT_LIST_DIR}/bwd_hdim256.cu)
endif()
