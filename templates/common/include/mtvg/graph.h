/*
 * microtvm-gen runtime: an on-device graph executor for TVM graph-executor archives.
 *
 * It runs the graph JSON (`executor-config/graph/...`) and the params blob
 * (`parameters/<mod>.params`) that TVM 0.8-0.18 wrote, calling the archive's operators
 * through its system-library registry with the legacy packed convention (DLTensor
 * arguments, inputs first, then outputs).
 *
 * Memory: nothing is allocated. The JSON and the params stay where they are (flash);
 * the parsed graph refers into the JSON text. The parsed graph lives in one
 * mtvg_graph_t whose arrays are sized by the MTVG_GRAPH_MAX_* macros below (the
 * generator sets them to the model's exact counts). Each storage id of the graph gets one
 * buffer, carved from one caller-supplied arena; a parameter whose bytes in the blob are
 * suitably aligned is used in place (no RAM at all), any other is copied once.
 *
 * Use, in this order:
 *   mtvg_graph_parse()       JSON -> nodes, entries, storage ids (validated)
 *   mtvg_graph_set_params()  bind the params blob to the graph's parameter inputs
 *   mtvg_graph_link()        find every operator in the system library
 *   mtvg_graph_plan()        give each storage id its memory
 *   mtvg_graph_input() / _output()  the tensors to write and read
 *   mtvg_graph_run()         as often as wanted
 * Each returns MTVG_OK on success and MTVG_FAILED after TVMAPISetLastError() said why.
 */
#ifndef MTVG_GRAPH_H_
#define MTVG_GRAPH_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpack/dlpack.h"
#include "mtvg/status.h"
#include "tvm/runtime/c_runtime_api.h"
#include "tvm/runtime/crt/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Limits (override with -D) ------------------------------------------------------ */

/*! \brief Most nodes (inputs, parameters and operators) a graph may have. */
#ifndef MTVG_GRAPH_MAX_NODES
#define MTVG_GRAPH_MAX_NODES 256
#endif

/*! \brief Most node outputs ("entries": one tensor view each). */
#ifndef MTVG_GRAPH_MAX_ENTRIES
#define MTVG_GRAPH_MAX_ENTRIES 256
#endif

/*! \brief Most storage ids (distinct buffers). */
#ifndef MTVG_GRAPH_MAX_STORAGE
#define MTVG_GRAPH_MAX_STORAGE 256
#endif

/*! \brief Most operator inputs over the whole graph. */
#ifndef MTVG_GRAPH_MAX_INPUT_REFS
#define MTVG_GRAPH_MAX_INPUT_REFS 512
#endif

/*! \brief Most graph outputs (heads). */
#ifndef MTVG_GRAPH_MAX_HEADS
#define MTVG_GRAPH_MAX_HEADS 16
#endif

/*! \brief Most dimensions of one tensor (graph entries and parameters). */
#ifndef MTVG_GRAPH_MAX_NDIM
#define MTVG_GRAPH_MAX_NDIM 6
#endif

/*! \brief Most arguments (inputs + outputs) of one operator call. */
#ifndef MTVG_GRAPH_MAX_OP_ARGS
#define MTVG_GRAPH_MAX_OP_ARGS 32
#endif

/*! \brief Deepest nesting of containers inside a value the parser skips. */
#ifndef MTVG_GRAPH_MAX_JSON_DEPTH
#define MTVG_GRAPH_MAX_JSON_DEPTH 16
#endif

/*! \brief Longest node, function or parameter name, in bytes. */
#ifndef MTVG_GRAPH_MAX_NAME_BYTES
#define MTVG_GRAPH_MAX_NAME_BYTES 1024
#endif

/*! \brief Most functions a system-library registry may list. */
#ifndef MTVG_REGISTRY_MAX_FUNCS
#define MTVG_REGISTRY_MAX_FUNCS 4096
#endif

/*! \brief Alignment of every storage buffer carved from the arena, in bytes. */
#define MTVG_GRAPH_STORAGE_ALIGN 16

/* ---- Sizes the generator relies on ------------------------------------------------------ */
/*
 * generator/project/fit.py reads these (through generator/abi.py) to bound a model's
 * mtvg_graph_t from below before anything is built. Sizes are with 32-bit pointers (the
 * boards); a 64-bit host's structs are larger, never smaller. The assertions after the
 * types hold them to it on every target the header is compiled for.
 */
/*! \brief sizeof(mtvg_graph_node_t), exact with 32-bit pointers. */
#define MTVG_GRAPH_NODE_SIZE 32
/*! \brief One per-node slot of row_ptr, arg_nodes and inputs (uint32_t each). */
#define MTVG_GRAPH_NODE_INDEX_SIZE 4
/*! \brief sizeof(mtvg_graph_ref_t). */
#define MTVG_GRAPH_REF_SIZE 8
/*! \brief mtvg_graph_entry_t up to its shape array: at least this many bytes. */
#define MTVG_GRAPH_ENTRY_HEAD_SIZE 8
/*! \brief One dimension of an entry's shape array (int64_t). */
#define MTVG_GRAPH_DIM_SIZE 8
/*! \brief sizeof(mtvg_graph_storage_t): at least its size, users, data and param fields. */
#define MTVG_GRAPH_STORAGE_MIN_SIZE 16

/* Set-up progress of an mtvg_graph_t (its `state`), in order. */
#define MTVG_GRAPH_STATE_EMPTY 0u
#define MTVG_GRAPH_STATE_PARSED 1u
#define MTVG_GRAPH_STATE_PARAMS 2u
#define MTVG_GRAPH_STATE_PLANNED 3u

/* ---- Types ---------------------------------------------------------------------------- */

/*! \brief A piece of the JSON text or params blob (not NUL-terminated). */
typedef struct {
  const char* ptr;
  uint32_t len;
} mtvg_slice_t;

/*! \brief Output `index` of node `node`. */
typedef struct {
  uint32_t node;
  uint32_t index;
} mtvg_graph_ref_t;

/*! \brief What a node is. */
typedef enum {
  MTVG_NODE_ARG = 0, /*!< op "null": a model input or a parameter */
  MTVG_NODE_OP = 1,  /*!< op "tvm_op" with a real function */
  MTVG_NODE_NOP = 2, /*!< op "tvm_op" with func_name "__nop": a reshape in place */
} mtvg_node_kind_t;

typedef struct {
  mtvg_slice_t name;
  mtvg_slice_t func_name;
  uint8_t kind;        /*!< mtvg_node_kind_t */
  uint8_t num_inputs;  /*!< operators: attrs.num_inputs (= entries in `inputs`) */
  uint8_t num_outputs; /*!< 1 for arg nodes */
  uint8_t attr_seen;   /*!< bit set of the attrs read (parser bookkeeping) */
  uint32_t first_input; /*!< index of its first input in mtvg_graph_t.input_refs */
  uint32_t listed_inputs; /*!< entries of its "inputs" list */
  TVMBackendPackedCFunc func; /*!< set by mtvg_graph_link() */
} mtvg_graph_node_t;

typedef struct {
  int32_t storage_id;
  DLDataType dtype;
  int32_t ndim;
  uint32_t size_bytes;
  int64_t shape[MTVG_GRAPH_MAX_NDIM];
  DLTensor tensor; /*!< the view operators receive; data set by mtvg_graph_plan() */
} mtvg_graph_entry_t;

typedef struct {
  uint32_t size_bytes;  /*!< the largest entry placed here */
  uint32_t users;       /*!< entries placed here */
  uint8_t* data;        /*!< set by mtvg_graph_plan() */
  const uint8_t* param; /*!< bytes of the parameter bound here, or NULL */
  uint8_t param_in_place; /*!< 1: data points into the params blob, no RAM used */
} mtvg_graph_storage_t;

/*! \brief A parsed graph. Large: make it static. */
typedef struct {
  uint32_t num_nodes;
  uint32_t num_entries;
  uint32_t num_storage;
  uint32_t num_input_refs;
  uint32_t num_arg_nodes;
  uint32_t num_heads;
  uint32_t num_row_ptr;
  uint32_t num_dltype;
  uint32_t num_storage_ids;
  uint32_t num_shapes;
  uint32_t num_inputs;   /*!< arg nodes without a parameter: the model's inputs */
  uint32_t state;        /*!< MTVG_GRAPH_STATE_*: how far set-up got */
  size_t storage_used;   /*!< arena bytes mtvg_graph_plan() used */
  mtvg_graph_node_t nodes[MTVG_GRAPH_MAX_NODES];
  mtvg_graph_ref_t input_refs[MTVG_GRAPH_MAX_INPUT_REFS];
  uint32_t row_ptr[MTVG_GRAPH_MAX_NODES + 1];
  uint32_t arg_nodes[MTVG_GRAPH_MAX_NODES];
  uint32_t inputs[MTVG_GRAPH_MAX_NODES]; /*!< node ids of the model's inputs, in arg order */
  mtvg_graph_ref_t heads[MTVG_GRAPH_MAX_HEADS];
  mtvg_graph_entry_t entries[MTVG_GRAPH_MAX_ENTRIES];
  mtvg_graph_storage_t storage[MTVG_GRAPH_MAX_STORAGE];
} mtvg_graph_t;

/* What fit.py assumes (the MTVG_GRAPH_*_SIZE constants above), checked at compile time. */
MTVG_STATIC_ASSERT(sizeof(mtvg_graph_node_t) >= MTVG_GRAPH_NODE_SIZE, "MTVG_GRAPH_NODE_SIZE");
MTVG_STATIC_ASSERT(sizeof(((mtvg_graph_t*)0)->row_ptr[0]) == MTVG_GRAPH_NODE_INDEX_SIZE &&
                       sizeof(((mtvg_graph_t*)0)->arg_nodes[0]) == MTVG_GRAPH_NODE_INDEX_SIZE &&
                       sizeof(((mtvg_graph_t*)0)->inputs[0]) == MTVG_GRAPH_NODE_INDEX_SIZE,
                   "MTVG_GRAPH_NODE_INDEX_SIZE");
MTVG_STATIC_ASSERT(sizeof(mtvg_graph_ref_t) == MTVG_GRAPH_REF_SIZE, "MTVG_GRAPH_REF_SIZE");
MTVG_STATIC_ASSERT(offsetof(mtvg_graph_entry_t, shape) >= MTVG_GRAPH_ENTRY_HEAD_SIZE,
                   "MTVG_GRAPH_ENTRY_HEAD_SIZE");
MTVG_STATIC_ASSERT(sizeof(((mtvg_graph_entry_t*)0)->shape[0]) == MTVG_GRAPH_DIM_SIZE,
                   "MTVG_GRAPH_DIM_SIZE");
MTVG_STATIC_ASSERT(sizeof(mtvg_graph_storage_t) >= MTVG_GRAPH_STORAGE_MIN_SIZE,
                   "MTVG_GRAPH_STORAGE_MIN_SIZE");
#if UINTPTR_MAX == 0xFFFFFFFFu
MTVG_STATIC_ASSERT(sizeof(mtvg_graph_node_t) == MTVG_GRAPH_NODE_SIZE,
                   "MTVG_GRAPH_NODE_SIZE is exact with 32-bit pointers");
#endif
/* fit.py's lower bound of the whole table, for the limits this file is compiled with. */
MTVG_STATIC_ASSERT(sizeof(mtvg_graph_t) >=
                       (size_t)MTVG_GRAPH_MAX_STORAGE * MTVG_GRAPH_STORAGE_MIN_SIZE +
                           (size_t)MTVG_GRAPH_MAX_ENTRIES *
                               (MTVG_GRAPH_ENTRY_HEAD_SIZE +
                                MTVG_GRAPH_DIM_SIZE * MTVG_GRAPH_MAX_NDIM) +
                           (size_t)MTVG_GRAPH_MAX_NODES *
                               (MTVG_GRAPH_NODE_SIZE + 3 * MTVG_GRAPH_NODE_INDEX_SIZE) +
                           (size_t)(MTVG_GRAPH_MAX_INPUT_REFS + MTVG_GRAPH_MAX_HEADS) *
                               MTVG_GRAPH_REF_SIZE,
                   "generator/project/fit.py's smallest mtvg_graph_t");

/* ---- Graph executor ------------------------------------------------------------------- */

/*!
 * \brief Parse and check a graph JSON of `len` bytes. The graph keeps pointers into
 * `json`, which must outlive it. Rejected: malformed JSON, counts over the limits,
 * inconsistent tables, an op other than "tvm_op"/"null", "__copy" and other special
 * functions, a "__nop" whose output is not its input's storage, `storage_scope`,
 * devices other than the CPU.
 */
int mtvg_graph_parse(mtvg_graph_t* g, const char* json, size_t len);

/*!
 * \brief Bind a params blob (format of `tvm.runtime.save_param_dict`) to the graph's
 * parameter nodes by name. Names, dtypes and shapes must match the graph exactly. The
 * blob must outlive the graph. Arg nodes left without a parameter are the model inputs.
 */
int mtvg_graph_set_params(mtvg_graph_t* g, const uint8_t* blob, size_t len);

/*! \brief Find each operator's function in `lib`'s registry by its func_name. */
int mtvg_graph_link(mtvg_graph_t* g, const TVMModule* lib);

/*!
 * \brief Arena bytes mtvg_graph_plan() will need (valid after mtvg_graph_set_params()),
 * for an arena aligned to MTVG_GRAPH_STORAGE_ALIGN; a misaligned arena needs up to
 * MTVG_GRAPH_STORAGE_ALIGN - 1 bytes more. The total of all storage is at most 2 GiB
 * (mtvg_graph_parse() refuses more).
 */
size_t mtvg_graph_storage_bytes(const mtvg_graph_t* g);

/*!
 * \brief Give every storage id its memory from `arena` (`size` bytes, any alignment) and
 * copy the parameters that cannot be used in place.
 */
int mtvg_graph_plan(mtvg_graph_t* g, uint8_t* arena, size_t size);

/*! \brief The model's inputs: number, name and tensor (write its data before a run). */
uint32_t mtvg_graph_num_inputs(const mtvg_graph_t* g);
mtvg_slice_t mtvg_graph_input_name(const mtvg_graph_t* g, uint32_t i);
DLTensor* mtvg_graph_input(mtvg_graph_t* g, uint32_t i);

/*! \brief The model's outputs (the graph's heads), valid after mtvg_graph_plan(). */
uint32_t mtvg_graph_num_outputs(const mtvg_graph_t* g);
DLTensor* mtvg_graph_output(mtvg_graph_t* g, uint32_t i);

/*! \brief Bytes of a tensor's data (elements x element bytes). */
uint64_t mtvg_tensor_bytes(const DLTensor* t);

/*! \brief Run every operator once, in graph order. */
int mtvg_graph_run(mtvg_graph_t* g);

/* ---- Params blob reader (used by mtvg_graph_set_params) ------------------------------- */

/*! \brief One parameter as stored in the blob. */
typedef struct {
  mtvg_slice_t name;
  DLDataType dtype;
  int32_t ndim;
  int64_t shape[MTVG_GRAPH_MAX_NDIM];
  const uint8_t* data; /*!< points into the blob */
  uint64_t size_bytes;
} mtvg_param_t;

/*! \brief Walks a params blob without copying it. */
typedef struct {
  const uint8_t* blob;
  size_t size;
  size_t name_pos;   /*!< next name */
  size_t tensor_pos; /*!< next tensor record */
  uint64_t count;    /*!< parameters in the blob */
  uint64_t done;     /*!< parameters returned so far */
} mtvg_params_reader_t;

/*! \brief Check the blob's header and its name table. */
int mtvg_params_open(mtvg_params_reader_t* r, const uint8_t* blob, size_t size);

/*!
 * \brief The next parameter.
 * \return 1 with *out filled, 0 at the end, MTVG_FAILED on a malformed record (last error
 *         set).
 */
int mtvg_params_next(mtvg_params_reader_t* r, mtvg_param_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_GRAPH_H_ */
