/*
 * microtvm-gen runtime: what the generated model glue (model_glue.c) provides to the app.
 *
 * The glue owns every buffer: inputs, outputs, the workspace arena and external pools
 * (AOT), or the graph's storage (graph executor), all static and sized from the archive
 * at generation time.
 */
#ifndef MTVG_MODEL_H_
#define MTVG_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "mtvg/accel.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief One input or output buffer of the model. */
typedef struct {
  const char* name;    /*!< tensor name as in the archive */
  uint8_t* data;       /*!< static buffer, aligned to 16 bytes (set by mtvg_model_init) */
  uint32_t size_bytes; /*!< exact size of the tensor */
} mtvg_tensor_t;

extern mtvg_tensor_t mtvg_model_inputs[];
extern const uint32_t mtvg_model_num_inputs;
extern mtvg_tensor_t mtvg_model_outputs[];
extern const uint32_t mtvg_model_num_outputs;

/*! \brief The counter hooks of the accelerator drivers the model calls (may be NULL). */
extern const mtvg_accel_counters_fn* const mtvg_model_accel_counters;
extern const uint32_t mtvg_model_num_accel_counters;

/*! \brief Bytes of the workspace arena reserved for TVMBackendAllocWorkspace. */
extern const uint32_t mtvg_model_arena_bytes;

/*! \brief Bytes reserved for the graph executor's storage (0 for AOT models). */
extern const uint32_t mtvg_model_storage_bytes;

/*! \brief Bytes of that storage the graph executor uses (valid after mtvg_model_init). */
uint32_t mtvg_model_storage_used(void);

/*!
 * \brief Prepare the model: hand the arena to the workspace allocator; for graph models,
 * parse the graph, bind the params, find the operators and place the storage.
 * \return MTVG_OK on success; MTVG_FAILED after TVMAPISetLastError() said why.
 */
int32_t mtvg_model_init(void);

/*!
 * \brief Run the model once on the input buffers, writing the output buffers.
 * \return MTVG_OK on success; otherwise the generated code's status (mtvg/status.h lists
 *         what it may be): MTVG_ACCEL_RUN_FAILED after an accelerator driver failed
 *         (mtvg_accel_message() says why), else TVMGetLastError() may say why.
 */
int32_t mtvg_model_run(void);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_MODEL_H_ */
