/*
 * microtvm-gen runtime: how the time evaluator times an operator archive's kernel alone.
 *
 * An operator archive's packed entries (its <mod>_lib1.c, written by microtvm-gen's
 * operator export) check every DLTensor argument before they call the plain C kernel. A
 * time evaluator that timed the packed entry would count those checks (tens of instructions
 * per argument) in every measurement. Instead it passes an mtvg_op_binding_t as the entry's
 * resource_handle on its untimed first call: after its checks the entry stores the kernel's
 * argument pointers in `data` and a function that calls the kernel on them in `run`, then
 * runs the kernel as usual. The timed calls are `run(data)`.
 *
 * An entry that does not know the binding (TVM's own packed functions ignore
 * resource_handle) leaves `run` NULL, and the evaluator times the packed entry instead.
 */
#ifndef MTVG_OPERATOR_H_
#define MTVG_OPERATOR_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Must be the binding's `magic`; an entry binds nothing otherwise. */
#define MTVG_OP_BINDING_MAGIC 0x6D6F7031u /* "mop1" */

/*! \brief A kernel bound to checked arguments, filled by an operator's packed entry. */
typedef struct {
  uint32_t magic;    /*!< MTVG_OP_BINDING_MAGIC, set by the caller */
  uint32_t capacity; /*!< entries of `data`; an entry with more arguments binds nothing */
  void** data;       /*!< the caller's array: each argument's first element */
  void (*run)(void* const* data); /*!< set by the entry: calls the kernel on `data` */
} mtvg_op_binding_t;

#ifdef __cplusplus
}
#endif

#endif /* MTVG_OPERATOR_H_ */
