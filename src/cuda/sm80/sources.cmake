# The sm80 forward kernel (every sm_80+ GPU): one translation unit per head dim, each with
# 2 dtypes x 2 mask policies, so 16 kernels per GPU architecture in all.
target_sources(tileattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/../forward.cc
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim64.cu
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim96.cu
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim128.cu
  ${CMAKE_CURRENT_LIST_DIR}/fwd_hdim256.cu)
