# The eager GPU baseline: cuBLAS GEMMs with S and P in device memory.
target_sources(tileattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/eager.cu ${CMAKE_CURRENT_LIST_DIR}/cublas_handle.cc)
