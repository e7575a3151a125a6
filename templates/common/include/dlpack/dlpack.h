/*
 * microtvm-gen runtime: the DLPack tensor types that TVM-generated C code reads.
 *
 * Written for microtvm-gen from the DLPack layout (v0.7, unchanged in v1.x for these
 * structs). Generated code reads DLTensor fields by offset, so the field order, types
 * and padding below are the ABI: do not reorder them.
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief DLPack version this header matches (0.7). */
#define DLPACK_VERSION 70

/*! \brief Device kinds. Only kDLCPU (1) exists on a microcontroller. */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMicroDev = 35 /* TVM's historical code for microTVM devices */
} DLDeviceType;

/*! \brief A device: its kind and its index among devices of that kind. */
typedef struct {
  DLDeviceType device_type; /*!< 4 bytes: enums are int-sized on every ABI we target */
  int32_t device_id;        /*!< 0 on a microcontroller */
} DLDevice;

/*! \brief Element type codes of DLDataType.code. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U
} DLDataTypeCode;

/*! \brief An element type: code, bits per lane, lanes (1 for scalars). 4 bytes. */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/*!
 * \brief A strided view of memory.
 * Generated code asserts strides == NULL (compact) and byte_offset == 0 on microcontrollers.
 */
typedef struct {
  void* data;           /*!< first byte of the tensor (before byte_offset) */
  DLDevice device;      /*!< where data lives */
  int32_t ndim;         /*!< number of dimensions */
  DLDataType dtype;     /*!< element type */
  int64_t* shape;       /*!< ndim extents */
  int64_t* strides;     /*!< NULL for compact row-major */
  uint64_t byte_offset; /*!< added to data before use */
} DLTensor;

#ifdef __cplusplus
}
#endif

#endif /* DLPACK_DLPACK_H_ */
