/*
 * microtvm-gen runtime: the system-library types that TVM-generated registries use.
 *
 * A graph-executor archive built with `--runtime=crt --system-lib` carries a file that
 * defines `const TVMModule* TVMSystemLibEntryPoint(void)`. Its registry lists every
 * operator: `names` is a blob whose first two bytes are the function count (u16,
 * little-endian), followed by each name and its NUL, then one more NUL; `funcs[i]` is the
 * i-th name's function.
 */
#ifndef TVM_RUNTIME_CRT_MODULE_H_
#define TVM_RUNTIME_CRT_MODULE_H_

#include "tvm/runtime/c_backend_api.h"
#include "tvm/runtime/c_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Names and functions of a system library, in the same order. */
typedef struct TVMFuncRegistry {
  const char* names;                    /*!< u16 count, then NUL-terminated names */
  const TVMBackendPackedCFunc* funcs;   /*!< one per name */
} TVMFuncRegistry;

/*! \brief A module as generated code sees it: its function registry. */
typedef struct TVMModule {
  const TVMFuncRegistry* registry;
} TVMModule;

/*! \brief Defined by the archive's system-library file (or by the generated glue). */
const TVMModule* TVMSystemLibEntryPoint(void);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_MODULE_H_ */
