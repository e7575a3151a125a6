/*
 * microtvm-gen runtime: the backend API that TVM-generated operator code calls.
 *
 * Workspace memory comes from one static arena (templates/common/src/workspace.c),
 * used strictly last-in first-out, as TVM's code generators allocate.
 */
#ifndef TVM_RUNTIME_C_BACKEND_API_H_
#define TVM_RUNTIME_C_BACKEND_API_H_

#include "tvm/runtime/c_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/*!
 * \brief Allocate nbytes of scratch memory for an operator.
 * \param device_type must be kDLCPU (1)
 * \param device_id must be 0
 * \param nbytes bytes wanted
 * \param dtype_code_hint, dtype_bits_hint element type (unused: every block is aligned to
 *        MTVG_WORKSPACE_ALIGN bytes)
 * \return the block, or NULL when the arena is exhausted or the device is not the CPU
 *         (generated code then returns -1 from the operator).
 */
TVM_DLL void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes,
                                       int dtype_code_hint, int dtype_bits_hint);

/*!
 * \brief Free the most recently allocated, still live block.
 * \return 0 on success; -1 when ptr is not that block (a LIFO violation).
 */
TVM_DLL int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr);

/*! \brief Environment of a parallel task group (declared for source compatibility only). */
typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;

/*! \brief A parallel loop body. Our runtime does not provide TVMBackendParallelLaunch. */
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_C_BACKEND_API_H_ */
