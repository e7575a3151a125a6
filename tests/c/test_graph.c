/*
 * Unit tests of the on-device graph executor (mtvg/graph.h: graph.c, graph_params.c), built
 * for the host with -Wall -Wextra -Werror and ASan/UBSan by tests/test_graph_c.py, with
 * -DMTVG_GRAPH_MAX_NODES=24 (so the limit test stays small; the real hannah graph has 18).
 *
 * The graphs are small hand-written JSON texts; each is parsed from an exact-size heap copy
 * without a NUL terminator. Params blobs are built here in the save_param_dict format. The
 * fake system library's add_one computes out = in0 + in1 + ... + 1.0f.
 * Error messages are matched loosely (a word or two), as their wording may change.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtvg/graph.h"
#include "mtvg/runtime.h"
#include "check.h"

#include "hannah_graph.inc"


/* Two graphs: large, so static. */
static mtvg_graph_t g;
static mtvg_graph_t g_saved;

/* ---- Helpers ------------------------------------------------------------------------------ */

/* Does the last error contain `word` (case-insensitive)? */
static int err_has(const char* word) {
  const char* e = TVMGetLastError();
  size_t n = strlen(word);
  for (; *e != '\0'; e++) {
    size_t i = 0;
    while (i < n && e[i] != '\0' &&
           tolower((unsigned char)e[i]) == tolower((unsigned char)word[i])) {
      i++;
    }
    if (i == n) {
      return 1;
    }
  }
  return 0;
}

static int err_has_any(const char* a, const char* b) { return err_has(a) || err_has(b); }

/* The text of the graph parsed last: an exact-size heap copy, kept until the next parse. */
static char* json_copy;

static int parse_into(mtvg_graph_t* graph, const char* text) {
  size_t n = strlen(text);
  free(json_copy);
  json_copy = (char*)malloc(n == 0 ? 1 : n);
  memcpy(json_copy, text, n);
  TVMAPISetLastError("");
  return mtvg_graph_parse(graph, json_copy, n);
}

static int parse(const char* text) { return parse_into(&g, text); }

/* `s` with the first `old` replaced by `repl` (heap); stops the tests if `old` is absent. */
static char* subst(const char* s, const char* old, const char* repl) {
  const char* at = strstr(s, old);
  if (at == NULL) {
    printf("test bug: '%s' not found\n", old);
    exit(2);
  }
  size_t head = (size_t)(at - s);
  size_t n = strlen(s) - strlen(old) + strlen(repl);
  char* out = (char*)malloc(n + 1);
  memcpy(out, s, head);
  memcpy(out + head, repl, strlen(repl));
  strcpy(out + head + strlen(repl), at + strlen(old));
  return out;
}

static int parse_subst(const char* base, const char* old, const char* repl) {
  char* text = subst(base, old, repl);
  int rc = parse(text);
  free(text);
  return rc;
}

/* ---- Params blobs -------------------------------------------------------------------------- */

typedef struct {
  const char* name;
  uint8_t code;
  uint8_t bits;
  int32_t ndim;
  int64_t shape[4];
  const void* data;
} pspec_t;

static uint8_t* put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
  return p + 8;
}

static uint8_t* put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
  return p + 4;
}

static uint64_t pspec_bytes(const pspec_t* s) {
  uint64_t n = (s->bits + 7u) / 8u;
  for (int32_t d = 0; d < s->ndim; d++) {
    n *= (uint64_t)s->shape[d];
  }
  return n;
}

/* A params blob in a heap block of exactly *len bytes (malloc: 16-aligned on the host). */
static uint8_t* make_params(const pspec_t* ps, int count, size_t* len) {
  size_t n = 32;
  for (int i = 0; i < count; i++) {
    n += 8 + strlen(ps[i].name) + 32 + 8u * (size_t)ps[i].ndim + 8 + (size_t)pspec_bytes(&ps[i]);
  }
  uint8_t* blob = (uint8_t*)malloc(n);
  uint8_t* p = put_u64(blob, 0xF7E58D4F05049CB7ull);
  p = put_u64(p, 0);
  p = put_u64(p, (uint64_t)count);
  for (int i = 0; i < count; i++) {
    p = put_u64(p, strlen(ps[i].name));
    memcpy(p, ps[i].name, strlen(ps[i].name));
    p += strlen(ps[i].name);
  }
  p = put_u64(p, (uint64_t)count);
  for (int i = 0; i < count; i++) {
    p = put_u64(p, 0xDD5E40F096B4A13Full);
    p = put_u64(p, 0);
    p = put_u32(p, 1); /* CPU */
    p = put_u32(p, 0);
    p = put_u32(p, (uint32_t)ps[i].ndim);
    *p++ = ps[i].code;
    *p++ = ps[i].bits;
    *p++ = 1; /* lanes */
    *p++ = 0;
    for (int32_t d = 0; d < ps[i].ndim; d++) {
      p = put_u64(p, (uint64_t)ps[i].shape[d]);
    }
    uint64_t nbytes = pspec_bytes(&ps[i]);
    p = put_u64(p, nbytes);
    memcpy(p, ps[i].data, (size_t)nbytes);
    p += nbytes;
  }
  *len = (size_t)(p - blob);
  return blob;
}

/* An empty dict: list magic, reserved, 0 names, 0 tensors. */
static const uint8_t empty_params[32] = {0xB7, 0x9C, 0x04, 0x05, 0x4F, 0x8D, 0xE5, 0xF7};

static const float weights[4] = {10.0f, 20.0f, 30.0f, 40.0f};

/* ---- Fake system library ------------------------------------------------------------------ */

static int calls;
static int last_num_args;
static int codes_ok = 1;
static int fail_next;

static uint64_t elements(const DLTensor* t) {
  uint64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) {
    n *= (uint64_t)t->shape[d];
  }
  return n;
}

/* out = in0 + in1 + ... + 1 (float32, element-wise). */
static int add_one(TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value,
                   int* out_ret_tcode, void* resource_handle) {
  (void)out_ret_value;
  (void)out_ret_tcode;
  (void)resource_handle;
  calls++;
  last_num_args = num_args;
  for (int i = 0; i < num_args; i++) {
    if (type_codes[i] != kTVMDLTensorHandle || args[i].v_handle == NULL) {
      codes_ok = 0;
      return -1;
    }
  }
  if (fail_next) {
    TVMAPISetLastError("add_one: boom");
    return -1;
  }
  DLTensor* out = (DLTensor*)args[num_args - 1].v_handle;
  float* o = (float*)out->data;
  for (uint64_t k = 0; k < elements(out); k++) {
    float sum = 1.0f;
    for (int i = 0; i < num_args - 1; i++) {
      sum += ((const float*)((DLTensor*)args[i].v_handle)->data)[k];
    }
    o[k] = sum;
  }
  return 0;
}

/* in -> (in, -in): two outputs. */
static int split(TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value,
                 int* out_ret_tcode, void* resource_handle) {
  (void)type_codes;
  (void)out_ret_value;
  (void)out_ret_tcode;
  (void)resource_handle;
  calls++;
  last_num_args = num_args;
  const DLTensor* in = (DLTensor*)args[0].v_handle;
  float* a = (float*)((DLTensor*)args[1].v_handle)->data;
  float* b = (float*)((DLTensor*)args[2].v_handle)->data;
  for (uint64_t k = 0; k < elements(in); k++) {
    a[k] = ((const float*)in->data)[k];
    b[k] = -((const float*)in->data)[k];
  }
  return 0;
}

static int count_only(TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value,
                      int* out_ret_tcode, void* resource_handle) {
  (void)args;
  (void)type_codes;
  (void)out_ret_value;
  (void)out_ret_tcode;
  (void)resource_handle;
  calls++;
  last_num_args = num_args;
  return 0;
}

static const char lib_names[] = "\x03\x00" "split\0" "other\0" "add_one\0" "\0";
static const TVMBackendPackedCFunc lib_funcs[3] = {split, count_only, add_one};
static const TVMFuncRegistry lib_registry = {lib_names, lib_funcs};
static const TVMModule lib = {&lib_registry};

static const char missing_names[] = "\x01\x00" "other\0" "\0";
static const TVMBackendPackedCFunc missing_funcs[1] = {count_only};
static const TVMFuncRegistry missing_registry = {missing_names, missing_funcs};
static const TVMModule lib_missing = {&missing_registry};

static const char hannah_names[] =
    "\x07\x00"
    "tvmgen_default_fused_nn_conv2d_add_nn_relu\0"
    "tvmgen_default_fused_nn_max_pool2d\0"
    "tvmgen_default_fused_nn_conv2d_add_nn_relu_1\0"
    "tvmgen_default_fused_nn_max_pool2d_1\0"
    "tvmgen_default_fused_nn_dense_add_nn_relu\0"
    "tvmgen_default_fused_nn_dense_add\0"
    "tvmgen_default_fused_nn_softmax\0"
    "\0";
static const TVMBackendPackedCFunc hannah_funcs[7] = {count_only, count_only, count_only,
                                                      count_only, count_only, count_only,
                                                      count_only};
static const TVMFuncRegistry hannah_registry = {hannah_names, hannah_funcs};
static const TVMModule hannah_lib = {&hannah_registry};

/* ---- Graphs ------------------------------------------------------------------------------- */

/* x (input) + weights0 (param) -> add_one -> head. */
static const char ONE[] =
    "{\"nodes\":["
    "{\"op\":\"null\",\"name\":\"x\",\"inputs\":[]},"
    "{\"op\":\"null\",\"name\":\"weights0\",\"inputs\":[]},"
    "{\"op\":\"tvm_op\",\"name\":\"add\",\"attrs\":{\"num_outputs\":\"1\",\"num_inputs\":\"2\","
    "\"flatten_data\":\"0\",\"func_name\":\"add_one\",\"hash\":\"0123\"},"
    "\"inputs\":[[0,0,0],[1,0,0]]}],"
    "\"arg_nodes\":[0,1],\"heads\":[[2,0,0]],"
    "\"attrs\":{\"dltype\":[\"list_str\",[\"float32\",\"float32\",\"float32\"]],"
    "\"storage_id\":[\"list_int\",[0,1,2]],"
    "\"shape\":[\"list_shape\",[[4],[4],[4]]]},"
    "\"node_row_ptr\":[0,1,2,3]}";

/* ONE followed by a __nop reshape [4] -> [2,2] in the same storage. */
static const char NOP[] =
    "{\"nodes\":["
    "{\"op\":\"null\",\"name\":\"x\",\"inputs\":[]},"
    "{\"op\":\"null\",\"name\":\"weights0\",\"inputs\":[]},"
    "{\"op\":\"tvm_op\",\"name\":\"add\",\"attrs\":{\"num_outputs\":\"1\",\"num_inputs\":\"2\","
    "\"flatten_data\":\"0\",\"func_name\":\"add_one\"},\"inputs\":[[0,0,0],[1,0,0]]},"
    "{\"op\":\"tvm_op\",\"name\":\"reshape_nop\",\"attrs\":{\"num_outputs\":\"1\","
    "\"num_inputs\":\"1\",\"flatten_data\":\"0\",\"func_name\":\"__nop\"},"
    "\"inputs\":[[2,0,0]]}],"
    "\"arg_nodes\":[0,1],\"heads\":[[3,0,0]],"
    "\"attrs\":{\"dltype\":[\"list_str\",[\"float32\",\"float32\",\"float32\",\"float32\"]],"
    "\"storage_id\":[\"list_int\",[0,1,2,2]],"
    "\"shape\":[\"list_shape\",[[4],[4],[4],[2,2]]]},"
    "\"node_row_ptr\":[0,1,2,3,4]}";

/* x -> split -> (x, -x), both heads. */
static const char SPLIT[] =
    "{\"nodes\":["
    "{\"op\":\"null\",\"name\":\"x\",\"inputs\":[]},"
    "{\"op\":\"tvm_op\",\"name\":\"s\",\"attrs\":{\"num_outputs\":\"2\",\"num_inputs\":\"1\","
    "\"flatten_data\":\"0\",\"func_name\":\"split\"},\"inputs\":[[0,0]]}],"
    "\"arg_nodes\":[0],\"heads\":[[1,0,0],[1,1,0]],"
    "\"attrs\":{\"dltype\":[\"list_str\",[\"float32\",\"float32\",\"float32\"]],"
    "\"storage_id\":[\"list_int\",[0,1,2]],"
    "\"shape\":[\"list_shape\",[[3],[3],[3]]]},"
    "\"node_row_ptr\":[0,1,3]}";

/* 16-aligned storage for plans. */
static uint8_t arena_block[4096 + 2 * MTVG_GRAPH_STORAGE_ALIGN];

static uint8_t* aligned_arena(size_t skew) {
  uintptr_t a = (uintptr_t)arena_block;
  a = (a + MTVG_GRAPH_STORAGE_ALIGN - 1) & ~(uintptr_t)(MTVG_GRAPH_STORAGE_ALIGN - 1);
  return (uint8_t*)a + skew;
}

static int inside(const void* p, const void* lo, size_t n) {
  return (const uint8_t*)p >= (const uint8_t*)lo && (const uint8_t*)p < (const uint8_t*)lo + n;
}

/* ---- Tests: things that work --------------------------------------------------------------- */

/* The ONE graph with weights0 bound from `blob`; `x` = 1..4; run; out must be x + w + 1. */
static void run_one_and_check(void) {
  DLTensor* x = mtvg_graph_input(&g, 0);
  CHECK(x != NULL);
  if (x == NULL) {
    return;
  }
  for (int i = 0; i < 4; i++) {
    ((float*)x->data)[i] = (float)(i + 1);
  }
  calls = 0;
  CHECK(mtvg_graph_run(&g) == 0);
  CHECK(calls == 1 && last_num_args == 3 && codes_ok);
  DLTensor* out = mtvg_graph_output(&g, 0);
  CHECK(out != NULL);
  if (out == NULL) {
    return;
  }
  const float* o = (const float*)out->data;
  CHECK(o[0] == 12.0f && o[1] == 23.0f && o[2] == 34.0f && o[3] == 45.0f);
  CHECK(out->ndim == 1 && out->shape[0] == 4 && out->dtype.code == kDLFloat &&
        out->dtype.bits == 32 && out->dtype.lanes == 1);
  CHECK(mtvg_tensor_bytes(out) == 16);
}

static void test_one_op_param_in_place(void) {
  pspec_t p = {"weights0", kDLFloat, 32, 1, {4}, weights};
  size_t len;
  uint8_t* blob = make_params(&p, 1, &len);
  /* 8-byte name: the data starts at byte 96, 16-aligned (malloc'd blob). */
  CHECK(len == 96 + 16 && memcmp(blob + 96, weights, 16) == 0);
  CHECK(parse(ONE) == 0);
  CHECK(g.num_nodes == 3 && g.num_entries == 3 && g.num_storage == 3);
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  CHECK(mtvg_graph_num_inputs(&g) == 1);
  mtvg_slice_t name = mtvg_graph_input_name(&g, 0);
  CHECK(name.len == 1 && name.ptr[0] == 'x');
  CHECK(mtvg_graph_num_outputs(&g) == 1);
  CHECK(g.storage[1].param == blob + 96 && g.storage[1].param_in_place == 1);
  /* x and the output: 16 bytes each; the parameter takes no RAM. */
  CHECK(mtvg_graph_storage_bytes(&g) == 32);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  uint8_t* arena = aligned_arena(0);
  TVMAPISetLastError("");
  CHECK(mtvg_graph_plan(&g, arena, 31) == -1);
  CHECK(err_has_any("arena", "bytes"));
  CHECK(mtvg_graph_plan(&g, arena, 32) == 0);
  CHECK(g.storage_used == 32);
  CHECK(g.entries[1].tensor.data == blob + 96);
  CHECK(inside(g.entries[0].tensor.data, arena, 32) && inside(g.entries[2].tensor.data, arena, 32));
  CHECK(g.entries[0].tensor.data != g.entries[2].tensor.data);
  run_one_and_check();
  run_one_and_check(); /* again: nothing is consumed */
  CHECK(mtvg_graph_input(&g, 1) == NULL && mtvg_graph_output(&g, 1) == NULL);
  CHECK(mtvg_graph_input_name(&g, 1).len == 0);
  free(blob);
}

static void test_one_op_param_copied(void) {
  /* 1-byte name: the data starts at byte 89, odd, so it cannot be used in place. */
  pspec_t p = {"w", kDLFloat, 32, 1, {4}, weights};
  size_t len;
  uint8_t* blob = make_params(&p, 1, &len);
  CHECK(len == 89 + 16 && memcmp(blob + 89, weights, 16) == 0);
  CHECK(parse_subst(ONE, "\"weights0\"", "\"w\"") == 0);
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  CHECK(g.storage[1].param == blob + 89 && g.storage[1].param_in_place == 0);
  CHECK(mtvg_graph_storage_bytes(&g) == 48);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  uint8_t* arena = aligned_arena(0);
  CHECK(mtvg_graph_plan(&g, arena, 47) == -1);
  CHECK(mtvg_graph_plan(&g, arena, 48) == 0);
  const void* w = g.entries[1].tensor.data;
  CHECK(inside(w, arena, 48) && ((uintptr_t)w % MTVG_GRAPH_STORAGE_ALIGN) == 0);
  CHECK(w != NULL && memcmp(w, weights, 16) == 0);
  memset(blob + 89, 0xFF, 16); /* the copy is what the operator reads */
  run_one_and_check();
  free(blob);
}

static void test_misaligned_arena(void) {
  pspec_t p = {"weights0", kDLFloat, 32, 1, {4}, weights};
  size_t len;
  uint8_t* blob = make_params(&p, 1, &len);
  CHECK(parse(ONE) == 0);
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  /* Starting 1 byte past a 16-byte boundary, 15 bytes of padding come first. */
  uint8_t* arena = aligned_arena(1);
  CHECK(mtvg_graph_plan(&g, arena, 32 + 15) == 0);
  CHECK(((uintptr_t)g.entries[0].tensor.data % MTVG_GRAPH_STORAGE_ALIGN) == 0);
  CHECK(((uintptr_t)g.entries[2].tensor.data % MTVG_GRAPH_STORAGE_ALIGN) == 0);
  CHECK(inside(g.entries[2].tensor.data, arena, 32 + 15));
  run_one_and_check();
  free(blob);
}

static void test_nop_aliases_storage(void) {
  pspec_t p = {"weights0", kDLFloat, 32, 1, {4}, weights};
  size_t len;
  uint8_t* blob = make_params(&p, 1, &len);
  CHECK(parse(NOP) == 0);
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  CHECK(mtvg_graph_storage_bytes(&g) == 32);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  CHECK(mtvg_graph_plan(&g, aligned_arena(0), 32) == 0);
  DLTensor* x = mtvg_graph_input(&g, 0);
  for (int i = 0; i < 4; i++) {
    ((float*)x->data)[i] = (float)(i + 1);
  }
  calls = 0;
  CHECK(mtvg_graph_run(&g) == 0);
  CHECK(calls == 1); /* the __nop calls nothing */
  DLTensor* out = mtvg_graph_output(&g, 0);
  CHECK(out->ndim == 2 && out->shape[0] == 2 && out->shape[1] == 2);
  CHECK(out->data == g.entries[2].tensor.data);
  const float* o = (const float*)out->data;
  CHECK(o[0] == 12.0f && o[3] == 45.0f);
  free(blob);
}

static void test_two_outputs(void) {
  CHECK(parse(SPLIT) == 0);
  CHECK(g.num_entries == 3);
  CHECK(mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == 0);
  CHECK(mtvg_graph_num_inputs(&g) == 1 && mtvg_graph_num_outputs(&g) == 2);
  CHECK(mtvg_graph_storage_bytes(&g) == 48);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  CHECK(mtvg_graph_plan(&g, aligned_arena(0), 48) == 0);
  float* x = (float*)mtvg_graph_input(&g, 0)->data;
  x[0] = 1.0f;
  x[1] = 2.0f;
  x[2] = 3.0f;
  calls = 0;
  CHECK(mtvg_graph_run(&g) == 0);
  CHECK(calls == 1 && last_num_args == 3);
  const float* a = (const float*)mtvg_graph_output(&g, 0)->data;
  const float* b = (const float*)mtvg_graph_output(&g, 1)->data;
  CHECK(a[2] == 3.0f && b[0] == -1.0f && b[2] == -3.0f);
}

/* Tensors with a 0 dimension need no memory, but operators still get non-NULL data. */
static void test_empty_tensors(void) {
  CHECK(parse_subst(ONE, "[[4],[4],[4]]", "[[0],[2,0],[0]]") == 0);
  CHECK(mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == 0);
  CHECK(mtvg_graph_storage_bytes(&g) == 0);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  CHECK(mtvg_graph_plan(&g, NULL, 0) == 0);
  CHECK(mtvg_graph_input(&g, 0) != NULL && mtvg_graph_input(&g, 0)->data != NULL);
  CHECK(mtvg_graph_input(&g, 1) != NULL && mtvg_graph_input(&g, 1)->data != NULL);
  CHECK(mtvg_tensor_bytes(mtvg_graph_input(&g, 1)) == 0);
  calls = 0;
  CHECK(mtvg_graph_run(&g) == 0);
  CHECK(calls == 1 && codes_ok);
  CHECK(mtvg_graph_output(&g, 0)->data != NULL);
}

static void test_hannah_graph(void) {
  TVMAPISetLastError("");
  CHECK(mtvg_graph_parse(&g, mtvg_fuzz_hannah_graph, sizeof(mtvg_fuzz_hannah_graph) - 1) == 0);
  CHECK(g.num_nodes == 18 && g.num_entries == 18 && g.num_storage == 13);
  CHECK(g.num_arg_nodes == 9 && g.num_heads == 1);
  CHECK(g.nodes[9].kind == MTVG_NODE_NOP && g.nodes[13].kind == MTVG_NODE_NOP);
  CHECK(mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == 0);
  CHECK(mtvg_graph_num_inputs(&g) == 9);
  /* Sum of the 13 storage buffers (largest entry of each), in bytes; all multiples of 16. */
  CHECK(mtvg_graph_storage_bytes(&g) == 32448);
  CHECK(mtvg_graph_link(&g, &hannah_lib) == 0);
  static uint8_t big[32448 + MTVG_GRAPH_STORAGE_ALIGN];
  CHECK(mtvg_graph_plan(&g, big, sizeof(big)) == 0);
  calls = 0;
  CHECK(mtvg_graph_run(&g) == 0);
  CHECK(calls == 7); /* 9 tvm_op nodes, 2 of them __nop */
  /* The output is the softmax entry 17, in storage 9 with entries 12 and 13. */
  CHECK(mtvg_graph_output(&g, 0)->data == g.entries[12].tensor.data);
  CHECK(mtvg_graph_output(&g, 0)->data == g.entries[13].tensor.data);
}

static void test_shallow_skipped_values_accepted(void) {
  /* Values the parser does not need are skipped, whatever their type. */
  CHECK(parse_subst(ONE, "\"hash\":\"0123\"", "\"hash\":[[1,2.5e3,true],{\"k\":null}]") == 0);
  CHECK(parse_subst(ONE, "\"node_row_ptr\"", "\"extra\":{\"a\":[[]]},\"node_row_ptr\"") == 0);
  CHECK(parse_subst(ONE, "\"attrs\":{\"dltype\"",
                    "\"attrs\":{\"device_index\":[\"list_int\",[1,1,1]],\"dltype\"") == 0);
}

/* ---- Tests: what must be refused ---------------------------------------------------------- */

typedef struct {
  const char* what;
  const char* base;
  const char* old;
  const char* repl;
  const char* word1; /* the error must contain one of these */
  const char* word2;
} bad_json_t;

static const bad_json_t bad_json[] = {
    {"op foo", ONE, "\"op\":\"tvm_op\"", "\"op\":\"foo\"", "not supported", "op"},
    {"storage_scope", ONE, "\"attrs\":{\"dltype\"",
     "\"attrs\":{\"storage_scope\":[\"list_str\",[\"global\",\"global\",\"global\"]],\"dltype\"",
     "storage_scope", "storage_scope"},
    {"__copy", ONE, "\"func_name\":\"add_one\"", "\"func_name\":\"__copy\"", "__copy",
     "not supported"},
    {"__nop into another storage id", NOP, "[0,1,2,2]", "[0,1,2,3]", "__nop", "storage"},
    {"__nop of another size", NOP, "[[4],[4],[4],[2,2]]", "[[4],[4],[4],[3]]", "__nop",
     "storage"},
    {"device_index 2", ONE, "\"attrs\":{\"dltype\"",
     "\"attrs\":{\"device_index\":[\"list_int\",[1,2,1]],\"dltype\"", "device", "CPU"},
    {"node_row_ptr last value", ONE, "[0,1,2,3]", "[0,1,2,4]", "node_row_ptr", "entr"},
    {"node_row_ptr vs outputs", ONE, "[0,1,2,3]", "[0,2,2,3]", "node_row_ptr", "output"},
    {"node_row_ptr short", ONE, "[0,1,2,3]", "[0,1,2]", "node_row_ptr", "entr"},
    {"node_row_ptr not from 0", ONE, "[0,1,2,3]", "[1,2,3,4]", "node_row_ptr", "entr"},
    {"input is a later node", NOP, "[[0,0,0],[1,0,0]]", "[[3,0,0],[1,0,0]]", "input", "later"},
    {"input is itself", NOP, "[[0,0,0],[1,0,0]]", "[[2,0,0],[1,0,0]]", "input", "later"},
    {"input output index", ONE, "[[0,0,0],[1,0,0]]", "[[0,1,0],[1,0,0]]", "input", "missing"},
    {"input node id huge", ONE, "[[0,0,0],[1,0,0]]", "[[4294967296,0,0],[1,0,0]]", "range",
     "input"},
    {"negative storage id", ONE, "[0,1,2]", "[0,-1,2]", "storage", "negative"},
    {"storage id too big", ONE, "[0,1,2]", "[0,1,100000]", "storage", "MAX_STORAGE"},
    {"negative dimension", ONE, "[[4],[4],[4]]", "[[4],[-1],[4]]", "dimension", "shape"},
    {"fractional dimension", ONE, "[[4],[4],[4]]", "[[4],[4.5],[4]]", "integer", "fraction"},
    {"unknown dtype", ONE, "[\"float32\",\"float32\",\"float32\"]",
     "[\"float32\",\"float32x4\",\"float32\"]", "dtype", "lanes"},
    {"dltype count", ONE, "[\"float32\",\"float32\",\"float32\"]", "[\"float32\",\"float32\"]",
     "dltype", "entr"},
    {"func_name missing", ONE, "\"func_name\":\"add_one\",", "", "func_name", "lacks"},
    {"num_inputs vs inputs", ONE, "\"num_inputs\":\"2\"", "\"num_inputs\":\"1\"", "num_inputs",
     "inputs"},
    {"num_outputs 0", ONE, "\"num_outputs\":\"1\"", "\"num_outputs\":\"0\"", "output",
     "node_row_ptr"},
    {"flatten_data 1", ONE, "\"flatten_data\":\"0\"", "\"flatten_data\":\"1\"", "flatten_data",
     "not supported"},
    {"arg_nodes names an op", ONE, "\"arg_nodes\":[0,1]", "\"arg_nodes\":[0,2]", "arg_nodes",
     "input"},
    {"arg_nodes out of range", ONE, "\"arg_nodes\":[0,1]", "\"arg_nodes\":[0,7]", "arg_nodes",
     "input"},
    {"head to a missing node", ONE, "\"heads\":[[2,0,0]]", "\"heads\":[[3,0,0]]", "heads",
     "output"},
    {"no heads", ONE, "\"heads\":[[2,0,0]]", "\"heads\":[]", "heads", "output"},
    {"inputs on an arg node", ONE, "\"name\":\"x\",\"inputs\":[]",
     "\"name\":\"x\",\"inputs\":[[1,0,0]]", "input", "null"},
    {"key twice", ONE, "\"arg_nodes\":[0,1]", "\"arg_nodes\":[0,1],\"arg_nodes\":[0,1]", "twice",
     "arg_nodes"},
    {"key missing", ONE, "\"arg_nodes\":[0,1],", "", "arg_nodes", "lacks"},
    {"text after the object", ONE, "\"node_row_ptr\":[0,1,2,3]}", "\"node_row_ptr\":[0,1,2,3]}x",
     "after", "text"},
    {"bad escape", ONE, "\"name\":\"x\"", "\"name\":\"x\\q\"", "escape", "string"},
    {"bad unicode escape", ONE, "\"name\":\"x\"", "\"name\":\"x\\u12g4\"", "escape", "string"},
    {"control character", ONE, "\"name\":\"x\"", "\"name\":\"x\ty\"", "control", "string"},
    {"not an object", ONE, "{\"nodes\"", "[\"nodes\"", "object", "graph"},
};

static void test_bad_json(void) {
  for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++) {
    const bad_json_t* b = &bad_json[i];
    int rc = parse_subst(b->base, b->old, b->repl);
    int words = err_has_any(b->word1, b->word2);
    CHECK(rc == -1 && words);
    if (rc != -1 || !words) {
      printf("     case: %s\n", b->what);
    }
    /* A graph that failed to parse cannot be used. */
    CHECK(mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == -1);
    CHECK(mtvg_graph_run(&g) == -1);
  }
}

/* An arg node (op "null") must have exactly one output: with 0 it would have no entry. */
static void test_arg_node_without_outputs(void) {
  static const char zero_last[] =
      "{\"nodes\":[{\"op\":\"null\",\"name\":\"x\",\"inputs\":[]},"
      "{\"op\":\"tvm_op\",\"name\":\"a\",\"attrs\":{\"func_name\":\"add_one\","
      "\"num_inputs\":\"1\",\"num_outputs\":\"1\"},\"inputs\":[[0,0,0]]},"
      "{\"op\":\"null\",\"name\":\"y\",\"inputs\":[],\"attrs\":{\"num_outputs\":\"0\"}}],"
      "\"arg_nodes\":[0,2],\"heads\":[[1,0,0]],"
      "\"attrs\":{\"dltype\":[\"list_str\",[\"float32\",\"float32\"]],"
      "\"storage_id\":[\"list_int\",[0,1]],\"shape\":[\"list_shape\",[[4],[4]]]},"
      "\"node_row_ptr\":[0,1,2,2]}";
  int rc = parse(zero_last);
  CHECK(rc == -1);
  if (rc == 0 && mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == 0 &&
      mtvg_graph_link(&g, &lib) == 0 && mtvg_graph_plan(&g, aligned_arena(0), 4096) == 0) {
    /* If it is accepted, every input must at least have memory. */
    for (uint32_t i = 0; i < mtvg_graph_num_inputs(&g); i++) {
      DLTensor* t = mtvg_graph_input(&g, i);
      CHECK(t != NULL && t->data != NULL);
    }
  }
  /* In the middle, y would take over the next node's output entry. */
  char* middle = subst(ONE, "\"name\":\"weights0\",\"inputs\":[]",
                       "\"name\":\"weights0\",\"inputs\":[],\"attrs\":{\"num_outputs\":\"0\"}");
  char* middle2 = subst(middle, "[0,1,2,3]", "[0,1,1,2]");
  char* middle3 = subst(middle2, "[0,1,2]", "[0,2]");
  char* middle4 = subst(middle3, "[\"float32\",\"float32\",\"float32\"]", "[\"float32\",\"float32\"]");
  char* middle5 = subst(middle4, "[[4],[4],[4]]", "[[4],[4]]");
  char* middle6 = subst(middle5, "[[0,0,0],[1,0,0]]", "[[0,0,0],[0,0,0]]");
  CHECK(parse(middle6) == -1);
  free(middle6);
  free(middle);
  free(middle2);
  free(middle3);
  free(middle4);
  free(middle5);
}

static void build_nesting(char* out, const char* key_prefix, int levels) {
  strcpy(out, key_prefix);
  size_t n = strlen(out);
  for (int i = 0; i < levels; i++) {
    out[n++] = '[';
  }
  for (int i = 0; i < levels; i++) {
    out[n++] = ']';
  }
  out[n] = '\0';
}

static void test_deep_nesting(void) {
  char value[3 * MTVG_GRAPH_MAX_JSON_DEPTH + 64];
  /* In a skipped node attribute, a skipped graph attribute and a skipped top-level key. */
  const char* olds[3] = {"\"hash\":\"0123\"", "\"attrs\":{\"dltype\"", "\"node_row_ptr\""};
  const char* prefixes[3] = {"\"hash\":", "\"attrs\":{\"x\":", "\"x\":"};
  const char* suffixes[3] = {"", ",\"dltype\"", ",\"node_row_ptr\""};
  for (int k = 0; k < 3; k++) {
    char repl[sizeof(value) + 32];
    build_nesting(value, prefixes[k], 2);
    snprintf(repl, sizeof(repl), "%s%s", value, suffixes[k]);
    CHECK(parse_subst(ONE, olds[k], repl) == 0);
    build_nesting(value, prefixes[k], MTVG_GRAPH_MAX_JSON_DEPTH + 1);
    snprintf(repl, sizeof(repl), "%s%s", value, suffixes[k]);
    CHECK(parse_subst(ONE, olds[k], repl) == -1);
    CHECK(err_has_any("MTVG_GRAPH_MAX_JSON_DEPTH", "nest"));
  }
  /* Far deeper than the limit: refused without deep recursion. */
  char* huge = (char*)malloc(200016);
  build_nesting(huge, "\"hash\":", 100000);
  CHECK(parse_subst(ONE, olds[0], huge) == -1);
  free(huge);
}

/* A graph of `n` arg nodes (all inputs), one output. */
static char* many_nodes(uint32_t n) {
  char* s = (char*)malloc(96u * n + 256u);
  size_t p = 0;
  p += (size_t)sprintf(s + p, "{\"nodes\":[");
  for (uint32_t i = 0; i < n; i++) {
    p += (size_t)sprintf(s + p, "%s{\"op\":\"null\",\"name\":\"n%u\",\"inputs\":[]}",
                         i ? "," : "", (unsigned)i);
  }
  p += (size_t)sprintf(s + p, "],\"arg_nodes\":[");
  for (uint32_t i = 0; i < n; i++) {
    p += (size_t)sprintf(s + p, "%s%u", i ? "," : "", (unsigned)i);
  }
  p += (size_t)sprintf(s + p, "],\"heads\":[[0,0,0]],\"attrs\":{\"dltype\":[\"list_str\",[");
  for (uint32_t i = 0; i < n; i++) {
    p += (size_t)sprintf(s + p, "%s\"int8\"", i ? "," : "");
  }
  p += (size_t)sprintf(s + p, "]],\"storage_id\":[\"list_int\",[");
  for (uint32_t i = 0; i < n; i++) {
    p += (size_t)sprintf(s + p, "%s%u", i ? "," : "", (unsigned)i);
  }
  p += (size_t)sprintf(s + p, "]],\"shape\":[\"list_shape\",[");
  for (uint32_t i = 0; i < n; i++) {
    p += (size_t)sprintf(s + p, "%s[1]", i ? "," : "");
  }
  p += (size_t)sprintf(s + p, "]]},\"node_row_ptr\":[");
  for (uint32_t i = 0; i <= n; i++) {
    p += (size_t)sprintf(s + p, "%s%u", i ? "," : "", (unsigned)i);
  }
  sprintf(s + p, "]}");
  return s;
}

static void test_limits(void) {
  char* at_limit = many_nodes(MTVG_GRAPH_MAX_NODES);
  char* over = many_nodes(MTVG_GRAPH_MAX_NODES + 1);
  CHECK(parse(at_limit) == 0);
  CHECK(g.num_nodes == MTVG_GRAPH_MAX_NODES);
  CHECK(mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == 0);
  CHECK(mtvg_graph_num_inputs(&g) == MTVG_GRAPH_MAX_NODES);
  CHECK(mtvg_graph_storage_bytes(&g) == 16u * MTVG_GRAPH_MAX_NODES);
  CHECK(parse(over) == -1);
  CHECK(err_has_any("MTVG_GRAPH_MAX_NODES", "nodes"));
  free(at_limit);
  free(over);
  /* Too many heads. */
  char heads[16 * (MTVG_GRAPH_MAX_HEADS + 2)] = "\"heads\":[[2,0,0]";
  for (int i = 0; i < MTVG_GRAPH_MAX_HEADS; i++) {
    strcat(heads, ",[2,0,0]");
  }
  strcat(heads, "]");
  CHECK(parse_subst(ONE, "\"heads\":[[2,0,0]]", heads) == -1);
  CHECK(err_has_any("MTVG_GRAPH_MAX_HEADS", "heads"));
  /* Too many dimensions. */
  CHECK(parse_subst(ONE, "[[4],[4],[4]]", "[[4],[4],[1,1,1,1,1,1,1,4]]") == -1);
  CHECK(err_has_any("MTVG_GRAPH_MAX_NDIM", "dimensions"));
  /* A name longer than MTVG_GRAPH_MAX_NAME_BYTES. */
  char* name = (char*)malloc(MTVG_GRAPH_MAX_NAME_BYTES + 16);
  strcpy(name, "\"name\":\"");
  size_t n = strlen(name);
  memset(name + n, 'a', MTVG_GRAPH_MAX_NAME_BYTES + 1);
  strcpy(name + n + MTVG_GRAPH_MAX_NAME_BYTES + 1, "\"");
  CHECK(parse_subst(ONE, "\"name\":\"x\"", name) == -1);
  CHECK(err_has_any("MTVG_GRAPH_MAX_NAME_BYTES", "long"));
  free(name);
  /* Tensors each under 2 GiB whose storage totals more: refused, so that 32-bit size_t
   * sums in mtvg_graph_storage_bytes() and mtvg_graph_plan() cannot wrap. */
  CHECK(parse_subst(ONE, "[[4],[4],[4]]", "[[4],[536870911],[536870911]]") == -1);
  CHECK(err_has("2 GiB"));
  CHECK(parse_subst(ONE, "[[4],[4],[4]]", "[[4],[4],[268435455]]") == 0); /* 1 GiB: fine */
}

static void test_truncated_json(void) {
  const char* texts[3] = {ONE, NOP, mtvg_fuzz_hannah_graph};
  for (int t = 0; t < 3; t++) {
    size_t full = strlen(texts[t]);
    size_t refused = 0;
    size_t with_message = 0;
    for (size_t n = 0; n < full; n++) {
      char* copy = (char*)malloc(n == 0 ? 1 : n);
      memcpy(copy, texts[t], n);
      TVMAPISetLastError("");
      if (mtvg_graph_parse(&g, n == 0 ? copy + 1 : copy, n) == -1) {
        refused++;
        with_message += TVMGetLastError()[0] != '\0';
      }
      free(copy);
    }
    CHECK(refused == full && with_message == full);
  }
}

static void test_link_errors(void) {
  CHECK(parse(ONE) == 0);
  CHECK(mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == 0);
  TVMAPISetLastError("");
  CHECK(mtvg_graph_link(&g, &lib_missing) == -1);
  CHECK(err_has("add_one"));
  CHECK(mtvg_graph_link(&g, NULL) == -1);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
}

static void test_operator_failure(void) {
  CHECK(parse(ONE) == 0);
  CHECK(mtvg_graph_set_params(&g, empty_params, sizeof(empty_params)) == 0);
  CHECK(mtvg_graph_storage_bytes(&g) == 48);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  CHECK(mtvg_graph_plan(&g, aligned_arena(0), 48) == 0);
  fail_next = 1;
  CHECK(mtvg_graph_run(&g) == -1);
  CHECK(err_has_any("boom", "add_one"));
  /* The executor's message carries the operator's, which it replaces on purpose (the
   * first error since a clear is otherwise kept). */
  CHECK(strcmp(TVMGetLastError(), "graph: add_one failed: add_one: boom") == 0);
  TVMAPISetLastError(NULL);
  fail_next = 0;
  CHECK(mtvg_graph_run(&g) == 0);
}

static void test_call_order(void) {
  pspec_t p = {"weights0", kDLFloat, 32, 1, {4}, weights};
  size_t len;
  uint8_t* blob = make_params(&p, 1, &len);
  /* Nothing works on a graph that was never parsed. */
  memset(&g, 0, sizeof(g));
  CHECK(mtvg_graph_set_params(&g, blob, len) == -1);
  CHECK(mtvg_graph_link(&g, &lib) == -1);
  CHECK(mtvg_graph_plan(&g, aligned_arena(0), 4096) == -1);
  CHECK(mtvg_graph_run(&g) == -1);
  CHECK(mtvg_graph_num_inputs(&g) == 0 && mtvg_graph_input(&g, 0) == NULL);
  /* Run before plan. */
  CHECK(parse(ONE) == 0);
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  CHECK(mtvg_graph_link(&g, &lib) == 0);
  TVMAPISetLastError("");
  CHECK(mtvg_graph_run(&g) == -1);
  CHECK(err_has("plan"));
  CHECK(mtvg_graph_input(&g, 0) == NULL && mtvg_graph_output(&g, 0) == NULL);
  /* Run after plan but without link. */
  CHECK(parse(ONE) == 0);
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  CHECK(mtvg_graph_plan(&g, aligned_arena(0), 4096) == 0);
  TVMAPISetLastError("");
  CHECK(mtvg_graph_run(&g) == -1);
  CHECK(err_has("link"));
  /* Params bound twice. */
  CHECK(parse(ONE) == 0);
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  CHECK(mtvg_graph_set_params(&g, blob, len) == -1);
  free(blob);
}

/* ---- Params ------------------------------------------------------------------------------- */

static void expect_params_refused(const uint8_t* blob, size_t len, const char* word1,
                                  const char* word2, const char* what) {
  memcpy(&g, &g_saved, sizeof(g));
  TVMAPISetLastError("");
  int rc = mtvg_graph_set_params(&g, blob, len);
  int words = err_has_any(word1, word2);
  CHECK(rc == -1 && words);
  if (rc != -1 || !words) {
    printf("     case: %s\n", what);
  }
}

static void test_params_errors(void) {
  CHECK(parse_into(&g_saved, ONE) == 0);
  static const int32_t ints[4] = {1, 2, 3, 4};
  const pspec_t unknown = {"zzz", kDLFloat, 32, 1, {4}, weights};
  const pspec_t on_op = {"add", kDLFloat, 32, 1, {4}, weights};
  const pspec_t shape = {"weights0", kDLFloat, 32, 1, {3}, weights};
  const pspec_t ndim = {"weights0", kDLFloat, 32, 2, {2, 2}, weights};
  const pspec_t dtype = {"weights0", kDLInt, 32, 1, {4}, ints};
  const pspec_t twice[2] = {{"weights0", kDLFloat, 32, 1, {4}, weights},
                            {"weights0", kDLFloat, 32, 1, {4}, weights}};
  size_t len;
  uint8_t* blob = make_params(&unknown, 1, &len);
  expect_params_refused(blob, len, "zzz", "zzz", "unknown name");
  free(blob);
  blob = make_params(&on_op, 1, &len);
  expect_params_refused(blob, len, "'add'", "input", "name of an operator node");
  free(blob);
  blob = make_params(&shape, 1, &len);
  expect_params_refused(blob, len, "weights0", "shape", "shape");
  free(blob);
  blob = make_params(&ndim, 1, &len);
  expect_params_refused(blob, len, "weights0", "shape", "ndim");
  free(blob);
  blob = make_params(&dtype, 1, &len);
  expect_params_refused(blob, len, "weights0", "dtype", "dtype");
  free(blob);
  blob = make_params(twice, 2, &len);
  expect_params_refused(blob, len, "weights0", "twice", "duplicate");
  free(blob);

  /* Damaged fields of a good blob: ndim at 72, dtype at 76, shape at 80, size at 88. */
  const pspec_t good = {"weights0", kDLFloat, 32, 1, {4}, weights};
  blob = make_params(&good, 1, &len);
  memcpy(&g, &g_saved, sizeof(g));
  CHECK(mtvg_graph_set_params(&g, blob, len) == 0);
  static const struct {
    size_t at;
    uint8_t value;
    const char* word;
    const char* what;
  } damage[] = {
      {0, 0x00, "magic", "list magic"},
      {16, 2, "names", "name count"},
      {24, 9, "name", "name length"},
      {40, 2, "tensor", "tensor count"},
      {48, 0x00, "magic", "tensor magic"},
      {72, 7, "MTVG_GRAPH_MAX_NDIM", "ndim"},
      {77, 0, "bits", "0 bits"},
      {78, 2, "lanes", "2 lanes"},
      {80, 5, "size", "shape vs byte size"},
      {87, 0x80, "negative", "negative dimension"},
      {88, 0x20, "size", "byte size vs shape"},
  };
  for (size_t i = 0; i < sizeof(damage) / sizeof(damage[0]); i++) {
    uint8_t* bad = (uint8_t*)malloc(len);
    memcpy(bad, blob, len);
    bad[damage[i].at] = damage[i].value;
    expect_params_refused(bad, len, damage[i].word, "params", damage[i].what);
    free(bad);
  }

  /* Every truncation of a good blob is refused, without reading past it. */
  size_t refused = 0;
  for (size_t n = 0; n < len; n++) {
    uint8_t* cut = (uint8_t*)malloc(n == 0 ? 1 : n);
    memcpy(cut, blob, n);
    memcpy(&g, &g_saved, sizeof(g));
    if (mtvg_graph_set_params(&g, n == 0 ? cut + 1 : cut, n) == -1) {
      refused++;
    }
    free(cut);
  }
  CHECK(refused == len);
  free(blob);

  /* A parameter whose storage id is shared with another tensor. */
  CHECK(parse_subst(ONE, "[0,1,2]", "[0,1,1]") == 0);
  blob = make_params(&good, 1, &len);
  TVMAPISetLastError("");
  CHECK(mtvg_graph_set_params(&g, blob, len) == -1);
  CHECK(err_has_any("weights0", "storage"));
  free(blob);
}

static void test_params_reader(void) {
  const pspec_t two[2] = {{"weights0", kDLFloat, 32, 1, {4}, weights},
                          {"s", kDLInt, 8, 0, {0}, "\x07"}};
  size_t len;
  uint8_t* blob = make_params(two, 2, &len);
  mtvg_params_reader_t r;
  mtvg_param_t p;
  CHECK(mtvg_params_open(&r, blob, len) == 0);
  CHECK(r.count == 2);
  CHECK(mtvg_params_next(&r, &p) == 1);
  CHECK(p.name.len == 8 && memcmp(p.name.ptr, "weights0", 8) == 0);
  CHECK(p.ndim == 1 && p.shape[0] == 4 && p.size_bytes == 16 && p.data == blob + 105);
  CHECK(p.dtype.code == kDLFloat && p.dtype.bits == 32 && p.dtype.lanes == 1);
  CHECK(mtvg_params_next(&r, &p) == 1);
  CHECK(p.name.len == 1 && p.ndim == 0 && p.size_bytes == 1 && p.data[0] == 7);
  CHECK(mtvg_params_next(&r, &p) == 0);
  CHECK(mtvg_params_next(&r, &p) == 0);
  free(blob);
  CHECK(mtvg_params_open(&r, empty_params, sizeof(empty_params)) == 0);
  CHECK(mtvg_params_next(&r, &p) == 0);
  CHECK(mtvg_params_open(&r, NULL, 0) == -1);
}

int main(void) {
  test_one_op_param_in_place();
  test_one_op_param_copied();
  test_misaligned_arena();
  test_nop_aliases_storage();
  test_two_outputs();
  test_empty_tensors();
  test_hannah_graph();
  test_shallow_skipped_values_accepted();
  test_bad_json();
  test_arg_node_without_outputs();
  test_deep_nesting();
  test_limits();
  test_truncated_json();
  test_link_errors();
  test_operator_failure();
  test_call_order();
  test_params_errors();
  test_params_reader();
  free(json_copy);
  return CHECK_REPORT();
}
