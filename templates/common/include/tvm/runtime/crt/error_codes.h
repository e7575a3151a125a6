/*
 * microtvm-gen runtime: the CRT error codes that TVM-generated code names.
 *
 * TVM 0.8-0.18 kernels (for example the Cortex-M DSP micro-kernels) include
 * <tvm/runtime/crt/error_codes.h> and return these values. An error code is
 * (category << 8) | code; system errors are negative.
 */
#ifndef MTVG_TVM_RUNTIME_CRT_ERROR_CODES_H_
#define MTVG_TVM_RUNTIME_CRT_ERROR_CODES_H_

#ifdef __cplusplus
extern "C" {
#endif

#define MTVG_CRT_ERROR(category, code) (((category) << 8) | (code))

typedef enum {
  kTvmErrorCategoryFunctionRegistry = 1,
  kTvmErrorCategoryFraming = 2,
  kTvmErrorCategoryWriteStream = 3,
  kTvmErrorCategorySession = 4,
  kTvmErrorCategoryPlatform = 5,
  kTvmErrorCategoryGenerated = 6,
  kTvmErrorCategoryExecutor = 7,
  kTvmErrorCategoryFunctionCall = 8,
  kTvmErrorCategoryTimeEvaluator = 9,
} tvm_crt_error_category_t;

typedef enum {
  kTvmErrorNoError = 0,
  kTvmErrorFramingInvalidState = MTVG_CRT_ERROR(kTvmErrorCategoryFraming, 0),
  kTvmErrorFramingShortPacket = MTVG_CRT_ERROR(kTvmErrorCategoryFraming, 1),
  kTvmErrorFramingInvalidEscape = MTVG_CRT_ERROR(kTvmErrorCategoryFraming, 2),
  kTvmErrorPlatformCheckFailure = MTVG_CRT_ERROR(kTvmErrorCategoryPlatform, 0),
  kTvmErrorPlatformShutdown = MTVG_CRT_ERROR(kTvmErrorCategoryPlatform, 2),
  kTvmErrorPlatformNoMemory = MTVG_CRT_ERROR(kTvmErrorCategoryPlatform, 3),
  kTvmErrorPlatformTimerBadState = MTVG_CRT_ERROR(kTvmErrorCategoryPlatform, 4),
  kTvmErrorPlatformStackAllocBadFree = MTVG_CRT_ERROR(kTvmErrorCategoryPlatform, 5),
  kTvmErrorFunctionCallNumArguments = MTVG_CRT_ERROR(kTvmErrorCategoryFunctionCall, 0),
  kTvmErrorFunctionCallWrongArgType = MTVG_CRT_ERROR(kTvmErrorCategoryFunctionCall, 1),
  kTvmErrorFunctionCallNotImplemented = MTVG_CRT_ERROR(kTvmErrorCategoryFunctionCall, 2),
  kTvmErrorFunctionCallInvalidArg = MTVG_CRT_ERROR(kTvmErrorCategoryFunctionCall, 3),
  kTvmErrorSystemErrorMask = (int)(1u << 31),
} tvm_crt_error_t;

#ifdef __cplusplus
}
#endif

#endif /* MTVG_TVM_RUNTIME_CRT_ERROR_CODES_H_ */
