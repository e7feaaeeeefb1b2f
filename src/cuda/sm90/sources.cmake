# sm90 building blocks: host-side TMA tensor maps (the device wrappers are headers). cuda.h
# comes with the toolkit's include directory; the driver is reached at run time through the
# runtime's entry-point query, so nothing links libcuda.
target_sources(tileattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensor_map.cc)
