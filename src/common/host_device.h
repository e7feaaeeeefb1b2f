// host_device.h: TILEATTN_HD marks functions shared by host code and CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define TILEATTN_HD __host__ __device__ __forceinline__
#else
#define TILEATTN_HD inline
#endif
