/*
 * Shared pieces of the graph-executor fuzz harnesses (fuzz_graph_json.c, fuzz_params.c):
 * a fake system library whose operators check every tensor they are given, and the
 * set-up sequence link -> storage_bytes -> plan -> inputs -> run -> outputs.
 *
 * Oracles (each failure aborts, so libFuzzer records a crash):
 *  - every operator argument is a DLTensor (type code 7) with data, on the CPU, with at
 *    most MTVG_GRAPH_MAX_NDIM dimensions, and at most MTVG_GRAPH_MAX_OP_ARGS arguments;
 *  - every byte of every tensor lies in the arena or in the params blob; all of them are
 *    read (and arena tensors written), so ASan sees overreads of the exact-size buffers;
 *  - mtvg_graph_plan() refuses one byte less than mtvg_graph_storage_bytes() plus the
 *    padding that aligns the arena, accepts exactly that, and uses no more;
 *  - no operator output lies in the params blob (it is read-only flash on a device);
 *  - mtvg_graph_run() returns the operators' status, with a message when it fails.
 */
#ifndef MTVG_FUZZ_COMMON_H_
#define MTVG_FUZZ_COMMON_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/asan_interface.h>

#include "mtvg/graph.h"

/* Largest arena a harness will hand to mtvg_graph_plan(). */
#define FZ_MAX_ARENA ((size_t)1 << 20)

#define FZ_CHECK(cond)                                                                    \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "fuzz oracle failed %s:%d: %s (last error: %s)\n", __FILE__,        \
              __LINE__, #cond, TVMGetLastError());                                        \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

/* Where tensor data may live: the arena and the params blob. */
static const uint8_t* fz_arena_lo;
static const uint8_t* fz_arena_hi;
static const uint8_t* fz_blob_lo;
static const uint8_t* fz_blob_hi;
static unsigned fz_calls;
static volatile uint8_t fz_sink;

static int fz_inside(const uint8_t* p, uint64_t n, const uint8_t* lo, const uint8_t* hi) {
  if (lo == NULL || p < lo || p > hi) {
    return 0;
  }
  return n <= (uint64_t)(hi - p);
}

/* Check one tensor and touch every byte of it; write it only if it lives in the arena. */
static void fz_touch_tensor(const DLTensor* t, uint8_t fill) {
  FZ_CHECK(t != NULL);
  FZ_CHECK(t->data != NULL);
  FZ_CHECK(t->device.device_type == kDLCPU && t->device.device_id == 0);
  FZ_CHECK(t->ndim >= 0 && t->ndim <= MTVG_GRAPH_MAX_NDIM);
  FZ_CHECK(t->ndim == 0 || t->shape != NULL);
  for (int32_t d = 0; d < t->ndim; d++) {
    FZ_CHECK(t->shape[d] >= 0);
  }
  uint64_t n = mtvg_tensor_bytes(t);
  if (n == 0) {
    return; /* an empty tensor only needs a non-NULL pointer, wherever it points */
  }
  const uint8_t* p = (const uint8_t*)t->data + t->byte_offset;
  int in_arena = fz_inside(p, n, fz_arena_lo, fz_arena_hi);
  int in_blob = fz_inside(p, n, fz_blob_lo, fz_blob_hi);
  FZ_CHECK(in_arena || in_blob);
  uint8_t acc = 0;
  for (uint64_t i = 0; i < n; i++) {
    acc ^= p[i];
  }
  fz_sink = acc;
  if (in_arena) {
    memset((uint8_t*)t->data + t->byte_offset, fill, (size_t)n);
  }
}

static int fz_op_ok(TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value,
                    int* out_ret_tcode, void* resource_handle) {
  (void)out_ret_value;
  (void)out_ret_tcode;
  (void)resource_handle;
  FZ_CHECK(num_args >= 0 && num_args <= MTVG_GRAPH_MAX_OP_ARGS);
  FZ_CHECK(num_args == 0 || (args != NULL && type_codes != NULL));
  for (int i = 0; i < num_args; i++) {
    FZ_CHECK(type_codes[i] == kTVMDLTensorHandle);
    fz_touch_tensor((const DLTensor*)args[i].v_handle, (uint8_t)(0x40 + i));
  }
  fz_calls++;
  return 0;
}

static int fz_op_fail(TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value,
                      int* out_ret_tcode, void* resource_handle) {
  (void)fz_op_ok(args, type_codes, num_args, out_ret_value, out_ret_tcode, resource_handle);
  TVMAPISetLastError("fz_op_fail: failing on purpose");
  return -1;
}

/* The fake system library: short names for hand-made graphs, the seeds' real names. */
static const char fz_names[] =
    "\x0f\x00"
    "f\0"
    "g\0"
    "fail\0"
    "tvmgen_default_fused_nn_conv2d_add_nn_relu\0"
    "tvmgen_default_fused_nn_max_pool2d\0"
    "tvmgen_default_fused_nn_conv2d_add_nn_relu_1\0"
    "tvmgen_default_fused_nn_max_pool2d_1\0"
    "tvmgen_default_fused_nn_dense_add_nn_relu\0"
    "tvmgen_default_fused_nn_dense_add\0"
    "tvmgen_default_fused_nn_softmax\0"
    "tvmgen_default_fused_nn_conv1d\0"
    "tvmgen_default_fused_nn_bias_add\0"
    "add_one\0"
    "h\0"
    "fused_op\0"
    "\0";
static const TVMBackendPackedCFunc fz_funcs[15] = {
    fz_op_ok, fz_op_ok, fz_op_fail, fz_op_ok, fz_op_ok, fz_op_ok, fz_op_ok, fz_op_ok,
    fz_op_ok, fz_op_ok, fz_op_ok, fz_op_ok, fz_op_ok, fz_op_ok, fz_op_ok};
static const TVMFuncRegistry fz_registry = {fz_names, fz_funcs};
static const TVMModule fz_module = {&fz_registry};

/* A slice the graph returns must lie inside the text it was parsed from. */
static void fz_check_slice(mtvg_slice_t s, const char* lo, size_t len) {
  if (s.len == 0) {
    return;
  }
  FZ_CHECK(s.ptr != NULL && s.ptr >= lo && s.ptr <= lo + len);
  FZ_CHECK(s.len <= (size_t)(lo + len - s.ptr));
}

/*
 * Everything after mtvg_graph_set_params(): link, plan into a heap arena whose start is
 * misaligned by `skew` bytes, write the inputs, run, read the outputs.
 * `blob`/`blob_len` is the bound params blob (tensors may point into it).
 *
 * The arena gets mtvg_graph_storage_bytes() plus the padding that aligns its start (plan
 * needs both); the bytes around it are poisoned, so ASan reports any access outside.
 */
static void fz_link_plan_run(mtvg_graph_t* g, const uint8_t* blob, size_t blob_len,
                             unsigned skew) {
  if (mtvg_graph_link(g, &fz_module) != 0) {
    FZ_CHECK(TVMGetLastError()[0] != '\0');
    return;
  }
  size_t need = mtvg_graph_storage_bytes(g);
  FZ_CHECK(need % MTVG_GRAPH_STORAGE_ALIGN == 0);
  if (need > FZ_MAX_ARENA) {
    return;
  }
  size_t block = need + 2 * MTVG_GRAPH_STORAGE_ALIGN + 1;
  uint8_t* raw = (uint8_t*)malloc(block);
  FZ_CHECK(raw != NULL);
  uint8_t* arena = raw + 1 + skew % MTVG_GRAPH_STORAGE_ALIGN;
  size_t pad = (MTVG_GRAPH_STORAGE_ALIGN - (uintptr_t)arena % MTVG_GRAPH_STORAGE_ALIGN) %
               MTVG_GRAPH_STORAGE_ALIGN;
  size_t size = need + pad;
  ASAN_POISON_MEMORY_REGION(raw, (size_t)(arena - raw));
  ASAN_POISON_MEMORY_REGION(arena + size, (size_t)(raw + block - (arena + size)));
  fz_arena_lo = arena;
  fz_arena_hi = arena + size;
  fz_blob_lo = blob;
  fz_blob_hi = blob == NULL ? NULL : blob + blob_len;
  /* One byte short must be refused. */
  if (need > 0) {
    FZ_CHECK(mtvg_graph_plan(g, arena, size - 1) == -1);
  }
  int rc = mtvg_graph_plan(g, arena, size);
  FZ_CHECK(rc == 0);
  FZ_CHECK(g->storage_used <= need);
  /* Nothing that gets written (operator outputs, model inputs) may live in the blob. */
  for (uint32_t n = 0; n < g->num_nodes; n++) {
    if (g->nodes[n].kind != MTVG_NODE_OP) {
      continue;
    }
    for (uint32_t k = 0; k < g->nodes[n].num_outputs; k++) {
      uint32_t e = g->row_ptr[n] + k;
      FZ_CHECK(e < g->num_entries);
      const DLTensor* t = &g->entries[e].tensor;
      FZ_CHECK(!fz_inside((const uint8_t*)t->data, 1, fz_blob_lo, fz_blob_hi));
    }
  }

  uint32_t num_inputs = mtvg_graph_num_inputs(g);
  FZ_CHECK(num_inputs <= g->num_nodes);
  for (uint32_t i = 0; i < num_inputs; i++) {
    DLTensor* t = mtvg_graph_input(g, i);
    FZ_CHECK(t != NULL);
    fz_touch_tensor(t, (uint8_t)i);
    FZ_CHECK(mtvg_tensor_bytes(t) == 0 ||
             fz_inside((const uint8_t*)t->data + t->byte_offset, mtvg_tensor_bytes(t),
                       fz_arena_lo, fz_arena_hi));
  }
  fz_calls = 0;
  rc = mtvg_graph_run(g);
  if (rc != 0) {
    FZ_CHECK(TVMGetLastError()[0] != '\0');
  } else {
    uint32_t num_outputs = mtvg_graph_num_outputs(g);
    FZ_CHECK(num_outputs == g->num_heads);
    for (uint32_t i = 0; i < num_outputs; i++) {
      fz_touch_tensor(mtvg_graph_output(g, i), 0);
    }
  }
  fz_arena_lo = fz_arena_hi = NULL;
  fz_blob_lo = fz_blob_hi = NULL;
  ASAN_UNPOISON_MEMORY_REGION(raw, block);
  free(raw);
}

#endif /* MTVG_FUZZ_COMMON_H_ */
