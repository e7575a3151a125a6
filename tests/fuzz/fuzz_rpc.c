/*
 * libFuzzer harness for the device's TVM 0.27 RPC server (templates/common/src/rpc_server.c,
 * mtvg/rpc_server.h). One input is one session: a sequence of packets handed one by one to
 * mtvg_rpc_handle(), so tensors, timers and handles carry over from packet to packet.
 * mtvg_rpc_reset() runs at the start of every input.
 *
 * Input layout
 *   byte 0    the reply capacity: cap = 64 * (1 + (byte & 7)), 64..512 bytes. The same value
 *             is passed as max_packet (what tvm.rpc.server.GetCRTMaxPacketSize reports).
 *   records   u16 little-endian n, then n bytes: one packet (u64 length of the rest, i32
 *             code, body), passed in an exact-size heap block. A last record shorter than n
 *             is passed as it is (a truncated packet); one lone trailing byte is ignored.
 *
 * Data handles. The server names tensors by their real pool address, which an input cannot
 * know. So before a packet is handed over, each field that can hold a data handle (the data
 * field of a tensor header, in a copy or in a DLTensor argument, and every OpaquePtr
 * argument) that equals FR_TOKEN_BASE + k (0x20000000 + k, k < FR_MAX_TOKENS) becomes the
 * address that the k-th successful allocation of this input got (counted from 0 over the
 * whole input, kInitServer and kShutdown included). A token of an allocation that has not
 * happened stays as it is. The fields are found with the harness' own decoder, so a packet
 * malformed after such a field still has it rewritten. tests/fuzz/make_rpc_seeds.py writes
 * its seeds that way.
 *
 * The fake system library: "vadd" (float32 c = a + b over any shape; it checks its arguments
 * like a TVM kernel: count, type codes, dtype, ndim, shapes, element-aligned byte_offset),
 * "fail" (always fails with TVMAPISetLastError), "echo" (returns its first argument when
 * that is an int or a float) and "mute" (fails without setting an error message). Each input may make FR_MAX_CALLS kernel calls; after that every
 * kernel fails, which bounds time_evaluator loops.
 *
 * The clock. scripts/fuzz.sh links the posix platform.c but wraps mtvg_timer_ticks/_hz/_align
 * (-Wl,--wrap) with a virtual clock: 1 MHz; a vadd call takes 1 + elements ticks, echo 0,
 * fail 1; and reading the clock again and again without a kernel call in between (a busy wait)
 * moves it on by doubling steps. So time_evaluator's min_repeat_ms, zero-time and cooldown
 * paths run quickly and deterministically.
 *
 * Oracles (a violation aborts, so libFuzzer keeps the input):
 *  - a reply fits in cap (ASan: the reply buffer is an exact-size heap block) and is a
 *    well-formed packet: u64 length == reply length - 8, code 4 (Return), 5 (Exception) or
 *    8 (CopyAck); Exception = [RawStr non-empty message]; Return = a packed sequence of
 *    None/Int/Bool/Float/OpaquePtr/RawStr/ByteArray values that ends with the packet;
 *  - a reply is empty exactly when the packet is a well-formed kShutdown;
 *  - a packet the harness' own decoder rejects (wrong length field, unknown type index, more
 *    than MTVG_RPC_MAX_ARGS arguments, trailing bytes, ...) gets an Exception;
 *  - reply shapes per request (doc §3.5): syscalls 1 value, kCallFunc [Int type, value] with
 *    the handles this server hands out, kCopyFromRemote only CopyAck or Exception;
 *  - a model of the pool: allocations are 64-aligned, non-zero, never overlap a live one,
 *    have the size the request asked for (0 -> 1 byte), at most MTVG_RPC_MAX_ALLOCS are live,
 *    and mtvg_rpc_pool_used() equals their sum; DevFreeData succeeds exactly for live data
 *    handles; copies succeed only inside a live allocation, and a valid copy that fits the
 *    reply succeeds; CopyToRemote writes the payload there, CopyFromRemote returns those bytes;
 *  - every tensor a kernel gets lies inside one live allocation starting at its data pointer,
 *    is on cpu(0), has strides NULL and at most MTVG_RPC_MAX_NDIM non-negative dimensions;
 *    vadd reads and writes all of it (ASan sees accesses beyond the static pool);
 *  - a time evaluator handle works only while alive, and its result is repeat finite
 *    non-negative f64s.
 *
 * Build and run: scripts/fuzz.sh. Replay one file: ./fuzz_rpc FILE... With FUZZ_RPC_TRACE=1
 * in the environment, every exchange is printed to stderr (request code, reply code and
 * either the returned values or the exception message).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtvg/operator.h"
#include "mtvg/rpc_server.h"
#include "tvm/runtime/c_runtime_api.h"
#include "tvm/runtime/crt/module.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
uint64_t __wrap_mtvg_timer_ticks(void);
uint64_t __wrap_mtvg_timer_hz(void);
void __wrap_mtvg_timer_align(void);

#define FR_CHECK(cond)                                                                      \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fuzz oracle failed %s:%d: %s (packet %u)\n", __FILE__, __LINE__,     \
              #cond, fr_packet_index);                                                      \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

#define FR_TOKEN_BASE 0x20000000u
#define FR_MAX_TOKENS 64u
#define FR_MAX_CALLS 2000u
#define FR_MAX_LIVE 64u
#define FR_ALIGN 64u

/* Handles and limits of rpc_server.c that the oracles rely on. */
#define FR_H_SYSTEM_LIB 0x10001u
#define FR_H_MODULE_GET_FUNCTION 0x10002u
#define FR_H_TIME_EVALUATOR 0x10003u
#define FR_H_MAX_PACKET_SIZE 0x10004u
#define FR_H_MODULE 0x20001u
#define FR_H_KERNEL_BASE 0x30000u
#define FR_H_TIMER_BASE 0x40000u

/* Wire type indices. */
enum {
  FR_NONE = 0, FR_INT = 1, FR_BOOL = 2, FR_FLOAT = 3, FR_PTR = 4, FR_DTYPE = 5, FR_DEVICE = 6,
  FR_DLTENSOR = 7, FR_RAW_STR = 8, FR_BYTE_ARRAY = 9, FR_SMALL_STR = 11, FR_SMALL_BYTES = 12,
  FR_STR = 65, FR_BYTES = 66, FR_FUNCTION = 68, FR_MODULE = 73, FR_RPC_OBJECT = 115
};

/* RPC codes. */
enum {
  FR_SHUTDOWN = 1, FR_INIT = 2, FR_CALL = 3, FR_RETURN = 4, FR_EXCEPTION = 5,
  FR_COPY_FROM = 6, FR_COPY_TO = 7, FR_COPY_ACK = 8, FR_GET_GLOBAL = 9, FR_FREE_HANDLE = 10,
  FR_SET_DEVICE = 11, FR_GET_ATTR = 12, FR_ALLOC = 13, FR_FREE_DATA = 14, FR_STREAM_SYNC = 15,
  FR_ALLOC_SCOPE = 17, FR_CREATE_STREAM = 18, FR_FREE_STREAM = 19, FR_SET_STREAM = 20,
  FR_GET_STREAM = 21
};

typedef struct {
  uint64_t data;
  int32_t dev_type;
  int32_t dev_id;
  int32_t ndim;
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
  int64_t shape[MTVG_RPC_MAX_NDIM];
  uint64_t byte_offset;
} fr_header_t;

typedef struct {
  int32_t type; /* object forms are stored as 8 (Str), 9 (Bytes) or 115 */
  uint64_t u;   /* Int, Bool, Float bits, handles; the length of strings and bytes */
  const uint8_t* bytes;
  int32_t dev_type;
  int32_t dev_id;
  fr_header_t tensor;
} fr_value_t;

#define FR_MAX_HANDLE_FIELDS (MTVG_RPC_MAX_ARGS + 1u)

typedef struct {
  const uint8_t* p;
  size_t left;
  int bad;
  const uint8_t* base;                      /* start of the packet */
  size_t handle_at[FR_MAX_HANDLE_FIELDS];   /* offsets of data-handle fields */
  unsigned handles;
} fr_reader_t;

typedef struct {
  int well_formed; /* the length field matches and the body decodes as the protocol says */
  int32_t code;
  uint64_t func;
  uint32_t argc;
  fr_value_t args[MTVG_RPC_MAX_ARGS];
  fr_header_t copy;
  uint64_t copy_nbytes;
  const uint8_t* copy_data;
} fr_request_t;

typedef struct {
  int32_t code;
  uint32_t count;
  fr_value_t values[3];
  const uint8_t* body;
  size_t body_len;
} fr_reply_t;

typedef struct {
  uint64_t addr;
  uint64_t size;
} fr_block_t;

static unsigned fr_packet_index;
static fr_block_t fr_live[FR_MAX_LIVE];
static unsigned fr_live_count;
static uint64_t fr_tokens[FR_MAX_TOKENS];
static unsigned fr_token_count;
static int fr_timer_live[MTVG_RPC_MAX_TIMERS];
static uint32_t fr_timer_repeat[MTVG_RPC_MAX_TIMERS];
static unsigned fr_calls;
static uint64_t fr_now;
static unsigned fr_idle_reads;
static volatile uint8_t fr_sink;

/* ---- Virtual clock (see the header comment) ------------------------------------------------ */

uint64_t __wrap_mtvg_timer_ticks(void) {
  if (++fr_idle_reads > 2) {
    fr_now += (uint64_t)1 << (fr_idle_reads < 42 ? fr_idle_reads : 42);
  }
  return fr_now;
}

uint64_t __wrap_mtvg_timer_hz(void) { return 1000000u; }

void __wrap_mtvg_timer_align(void) {}

/* ---- The pool model --------------------------------------------------------------------------- */

static void fr_model_reset(void) {
  fr_live_count = 0;
  memset(fr_timer_live, 0, sizeof(fr_timer_live));
}

static int fr_find_live(uint64_t addr) {
  for (unsigned i = 0; i < fr_live_count; i++) {
    if (fr_live[i].addr == addr) {
      return (int)i;
    }
  }
  return -1;
}

static uint64_t fr_model_used(void) {
  uint64_t used = 0;
  for (unsigned i = 0; i < fr_live_count; i++) {
    used += fr_live[i].size;
  }
  return used;
}

/* Bytes of a compact tensor, or UINT64_MAX when a dimension is negative or a non-zero
 * partial product of the shape exceeds UINT32_MAX (the server refuses those: they exceed its
 * pool). A zero dimension makes the tensor empty whatever follows, as in the server. */
static uint64_t fr_tensor_bytes(int32_t ndim, const int64_t* shape, uint8_t bits, uint16_t lanes) {
  uint64_t count = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      return UINT64_MAX;
    }
    uint64_t d = (uint64_t)shape[i];
    if (count != 0 && d > UINT32_MAX) {
      return UINT64_MAX;
    }
    count *= d; /* both factors are at most 2^32 here, or count is 0 */
    if (count > UINT32_MAX) {
      return UINT64_MAX;
    }
  }
  return count * (((uint64_t)bits * lanes + 7u) / 8u);
}

/* [data + off, + nbytes) lies in the live allocation that starts at data. */
static int fr_range_ok(uint64_t data, uint64_t off, uint64_t nbytes) {
  int i = fr_find_live(data);
  return i >= 0 && off <= fr_live[i].size && nbytes <= fr_live[i].size - off;
}

/* ---- The fake system library ----------------------------------------------------------------- */

/* Oracle checks every kernel applies to what the server passes. */
static void fr_check_args(TVMValue* args, int* codes, int n) {
  FR_CHECK(n >= 0 && n <= (int)MTVG_RPC_MAX_ARGS);
  FR_CHECK(n == 0 || (args != NULL && codes != NULL));
  for (int i = 0; i < n; i++) {
    switch (codes[i]) {
      case kDLInt:
      case kDLFloat:
      case kTVMNullptr:
        break;
      case kTVMStr:
        FR_CHECK(args[i].v_str != NULL);
        FR_CHECK(strlen(args[i].v_str) < MTVG_RPC_STRING_BYTES);
        break;
      case kTVMDLTensorHandle: {
        const DLTensor* t = (const DLTensor*)args[i].v_handle;
        FR_CHECK(t != NULL && t->data != NULL && t->strides == NULL);
        FR_CHECK(t->device.device_type == kDLCPU && t->device.device_id == 0);
        FR_CHECK(t->ndim >= 0 && t->ndim <= (int32_t)MTVG_RPC_MAX_NDIM);
        FR_CHECK(t->ndim == 0 || t->shape != NULL);
        uint64_t bytes = fr_tensor_bytes(t->ndim, t->shape, t->dtype.bits, t->dtype.lanes);
        FR_CHECK(bytes != UINT64_MAX);
        FR_CHECK(fr_range_ok((uint64_t)(uintptr_t)t->data, t->byte_offset, bytes));
        break;
      }
      default:
        FR_CHECK(!"unexpected type code");
    }
  }
}

static int fr_budget(void) {
  if (++fr_calls > FR_MAX_CALLS) {
    TVMAPISetLastError("fuzz_rpc: kernel call budget of this input used up");
    return -1;
  }
  fr_idle_reads = 0;
  return 0;
}

static int fr_fail(const char* msg) {
  TVMAPISetLastError(msg);
  return -1;
}

/* vadd on bound arguments: what an operator archive's binding runs (mtvg/operator.h). */
static uint64_t fr_vadd_count;

static void fr_vadd_run(void* const* data) {
  const uint8_t* a = (const uint8_t*)data[0];
  const uint8_t* b = (const uint8_t*)data[1];
  uint8_t* c = (uint8_t*)data[2];
  /* The same call budget as the packed entry (a bound kernel cannot fail): past it the
   * clock still moves, so the timer's loops end, but no work is done. */
  if (++fr_calls > FR_MAX_CALLS) {
    fr_now += 1u + fr_vadd_count;
    return;
  }
  for (uint64_t i = 0; i < fr_vadd_count; i++) {
    float x;
    float y;
    memcpy(&x, a + 4u * i, sizeof(x));
    memcpy(&y, b + 4u * i, sizeof(y));
    x += y;
    memcpy(c + 4u * i, &x, sizeof(x));
  }
  fr_now += 1u + fr_vadd_count;
}

/* Checks like an operator archive's entry, binds when asked, then adds. */
static int fr_vadd(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  (void)ret;
  (void)ret_code;
  fr_check_args(args, codes, n);
  if (fr_budget() != 0) {
    return -1;
  }
  if (n != 3) {
    return fr_fail("vadd: expected 3 arguments");
  }
  const DLTensor* t[3];
  for (int i = 0; i < 3; i++) {
    if (codes[i] != kTVMDLTensorHandle) {
      return fr_fail("vadd: arguments must be tensors");
    }
    t[i] = (const DLTensor*)args[i].v_handle;
    if (t[i]->dtype.code != kDLFloat || t[i]->dtype.bits != 32 || t[i]->dtype.lanes != 1) {
      return fr_fail("vadd: arguments must be float32");
    }
    if (t[i]->byte_offset % sizeof(float) != 0) {
      return fr_fail("vadd: byte_offset must be a multiple of 4");
    }
    if (t[i]->ndim != t[0]->ndim) {
      return fr_fail("vadd: ndim mismatch");
    }
    for (int32_t d = 0; d < t[0]->ndim; d++) {
      if (t[i]->shape[d] != t[0]->shape[d]) {
        return fr_fail("vadd: shape mismatch");
      }
    }
  }
  void* data[3];
  for (int i = 0; i < 3; i++) {
    data[i] = (uint8_t*)t[i]->data + t[i]->byte_offset;
  }
  fr_vadd_count = fr_tensor_bytes(t[0]->ndim, t[0]->shape, 32, 1) / sizeof(float);
  mtvg_op_binding_t* binding = (mtvg_op_binding_t*)res;
  if (binding != NULL && binding->magic == MTVG_OP_BINDING_MAGIC && binding->capacity >= 3u) {
    for (int i = 0; i < 3; i++) {
      binding->data[i] = data[i];
    }
    binding->run = fr_vadd_run;
  }
  fr_vadd_run(data);
  return 0;
}

static int fr_always_fail(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code,
                          void* res) {
  (void)ret;
  (void)ret_code;
  (void)res;
  fr_check_args(args, codes, n);
  if (fr_budget() != 0) {
    return -1;
  }
  fr_now += 1u;
  return fr_fail("fail: failing on purpose");
}

static int fr_echo(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  (void)res;
  fr_check_args(args, codes, n);
  if (fr_budget() != 0) {
    return -1;
  }
  if (n > 0 && (codes[0] == kDLInt || codes[0] == kDLFloat)) {
    *ret = args[0];
    *ret_code = codes[0];
  }
  /* Reads every tensor argument, so ASan sees it. */
  for (int i = 0; i < n; i++) {
    if (codes[i] == kTVMDLTensorHandle) {
      const DLTensor* t = (const DLTensor*)args[i].v_handle;
      uint64_t bytes = fr_tensor_bytes(t->ndim, t->shape, t->dtype.bits, t->dtype.lanes);
      const uint8_t* p = (const uint8_t*)t->data + t->byte_offset;
      uint8_t acc = 0;
      for (uint64_t k = 0; k < bytes; k++) {
        acc ^= p[k];
      }
      fr_sink = acc;
    }
  }
  return 0;
}

static int fr_mute(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  (void)ret;
  (void)ret_code;
  (void)res;
  fr_check_args(args, codes, n);
  if (fr_budget() != 0) {
    return -1;
  }
  return -1;
}

#define FR_NUM_FUNCS 4u
#define FR_ECHO (FR_H_KERNEL_BASE + 2u)
static const char fr_names[] = "\x04\x00vadd\0fail\0echo\0mute\0";
static const TVMBackendPackedCFunc fr_funcs[FR_NUM_FUNCS] = {fr_vadd, fr_always_fail, fr_echo,
                                                             fr_mute};
static const TVMFuncRegistry fr_registry = {fr_names, fr_funcs};
static const TVMModule fr_module = {&fr_registry};
static const char* const fr_func_names[FR_NUM_FUNCS] = {"vadd", "fail", "echo", "mute"};

const TVMModule* TVMSystemLibEntryPoint(void) { return &fr_module; }

/* ---- Decoding (the harness' own reading of the protocol document) ------------------------------ */

static const uint8_t* fr_take(fr_reader_t* r, uint64_t n) {
  if (r->bad || n > r->left) {
    r->bad = 1;
    return NULL;
  }
  const uint8_t* p = r->p;
  r->p += n;
  r->left -= (size_t)n;
  return p;
}

static uint64_t fr_uint(fr_reader_t* r, unsigned n) {
  const uint8_t* p = fr_take(r, n);
  uint64_t v = 0;
  for (unsigned i = 0; p != NULL && i < n; i++) {
    v |= (uint64_t)p[i] << (8u * i);
  }
  return v;
}

static int32_t fr_i32(fr_reader_t* r) { return (int32_t)(uint32_t)fr_uint(r, 4); }

/* Notes that the next 8 bytes may be a data handle. */
static void fr_handle_field(fr_reader_t* r) {
  if (r->base != NULL && !r->bad && r->left >= 8u && r->handles < FR_MAX_HANDLE_FIELDS) {
    r->handle_at[r->handles++] = (size_t)(r->p - r->base);
  }
}

static void fr_header(fr_reader_t* r, fr_header_t* h) {
  fr_handle_field(r);
  h->data = fr_uint(r, 8);
  h->dev_type = fr_i32(r);
  h->dev_id = fr_i32(r);
  h->ndim = fr_i32(r);
  h->code = (uint8_t)fr_uint(r, 1);
  h->bits = (uint8_t)fr_uint(r, 1);
  h->lanes = (uint16_t)fr_uint(r, 2);
  if (r->bad || h->ndim < 0 || h->ndim > (int32_t)MTVG_RPC_MAX_NDIM) {
    r->bad = 1;
    return;
  }
  for (int32_t i = 0; i < h->ndim; i++) {
    h->shape[i] = (int64_t)fr_uint(r, 8);
  }
  h->byte_offset = fr_uint(r, 8);
}

static void fr_value(fr_reader_t* r, fr_value_t* v) {
  memset(v, 0, sizeof(*v));
  v->type = fr_i32(r);
  if (r->bad) {
    return;
  }
  int32_t t = v->type;
  if (t == FR_SMALL_STR || t == FR_SMALL_BYTES ||
      (t >= 64 && t != FR_FUNCTION && t != FR_MODULE)) {
    int32_t inner = fr_i32(r);
    if (inner == FR_STR || inner == FR_BYTES) {
      v->type = inner == FR_STR ? FR_RAW_STR : FR_BYTE_ARRAY;
      v->u = fr_uint(r, 8);
      v->bytes = fr_take(r, v->u);
    } else if (inner == FR_RPC_OBJECT) {
      v->type = FR_RPC_OBJECT;
      v->u = fr_uint(r, 8);
    } else {
      r->bad = 1;
    }
    return;
  }
  switch (t) {
    case FR_NONE:
      break;
    case FR_PTR:
      fr_handle_field(r);
      v->u = fr_uint(r, 8);
      break;
    case FR_INT:
    case FR_BOOL:
    case FR_FLOAT:
    case FR_DTYPE:
    case FR_FUNCTION:
    case FR_MODULE:
      v->u = fr_uint(r, 8);
      break;
    case FR_DEVICE:
      v->dev_type = fr_i32(r);
      v->dev_id = fr_i32(r);
      break;
    case FR_DLTENSOR:
      fr_header(r, &v->tensor);
      break;
    case FR_RAW_STR:
    case FR_BYTE_ARRAY:
      v->u = fr_uint(r, 8);
      v->bytes = fr_take(r, v->u);
      break;
    default:
      r->bad = 1;
  }
}

/* A packed sequence that ends the packet. */
static void fr_args(fr_reader_t* r, fr_request_t* q) {
  int32_t n = fr_i32(r);
  if (r->bad || n < 0 || n > (int32_t)MTVG_RPC_MAX_ARGS) {
    r->bad = 1;
    return;
  }
  for (int32_t i = 0; i < n && !r->bad; i++) {
    fr_value(r, &q->args[i]);
  }
  if (r->left != 0) {
    r->bad = 1;
  }
  q->argc = (uint32_t)n;
}

/* Decodes a request. `r` gets the reader afterwards, with the offsets of the data-handle
 * fields it passed. */
static void fr_parse_request(const uint8_t* p, size_t n, fr_request_t* q, fr_reader_t* r) {
  memset(q, 0, sizeof(*q));
  memset(r, 0, sizeof(*r));
  r->p = p;
  r->left = n;
  r->base = p;
  uint64_t declared = fr_uint(r, 8);
  q->code = fr_i32(r);
  if (r->bad || declared != n - 8u) {
    q->code = -1000; /* not a packet at all */
    return;
  }
  switch (q->code) {
    case FR_INIT: {
      uint64_t len = fr_uint(r, 8);
      const uint8_t* ver = fr_take(r, len);
      fr_args(r, q);
      q->well_formed = !r->bad && len == 5 && memcmp(ver, "0.8.0", 5) == 0 && q->argc == 0;
      return;
    }
    case FR_CALL:
      q->func = fr_uint(r, 8);
      fr_args(r, q);
      break;
    case FR_COPY_FROM:
    case FR_COPY_TO:
      fr_header(r, &q->copy);
      q->copy_nbytes = fr_uint(r, 8);
      if (q->code == FR_COPY_TO) {
        q->copy_data = fr_take(r, q->copy_nbytes);
      }
      if (r->left != 0) {
        r->bad = 1;
      }
      break;
    default:
      if (q->code >= FR_GET_GLOBAL) {
        fr_args(r, q);
      }
      break;
  }
  q->well_formed = !r->bad;
}

static void fr_parse_reply(const uint8_t* p, size_t n, fr_reply_t* y) {
  memset(y, 0, sizeof(*y));
  fr_reader_t r = {.p = p, .left = n};
  FR_CHECK(n >= 12);
  FR_CHECK(fr_uint(&r, 8) == n - 8u);
  y->code = fr_i32(&r);
  FR_CHECK(y->code == FR_RETURN || y->code == FR_EXCEPTION || y->code == FR_COPY_ACK);
  y->body = r.p;
  y->body_len = r.left;
  if (y->code == FR_COPY_ACK) {
    return;
  }
  int32_t count = fr_i32(&r);
  FR_CHECK(!r.bad && count >= 1 && count <= 3);
  y->count = (uint32_t)count;
  for (int32_t i = 0; i < count; i++) {
    fr_value_t* v = &y->values[i];
    v->type = fr_i32(&r);
    switch (v->type) {
      case FR_NONE:
        break;
      case FR_INT:
      case FR_BOOL:
      case FR_FLOAT:
      case FR_PTR:
        v->u = fr_uint(&r, 8);
        break;
      case FR_RAW_STR:
      case FR_BYTE_ARRAY:
        v->u = fr_uint(&r, 8);
        v->bytes = fr_take(&r, v->u);
        break;
      default:
        FR_CHECK(!"unexpected type index in a reply");
    }
    FR_CHECK(!r.bad);
  }
  FR_CHECK(r.left == 0);
  if (y->code == FR_EXCEPTION) {
    FR_CHECK(y->count == 1 && y->values[0].type == FR_RAW_STR && y->values[0].u > 0);
  }
}

/* ---- Per-request oracles ------------------------------------------------------------------------ */

static int fr_is_none(const fr_reply_t* y) {
  return y->code == FR_RETURN && y->count == 1 && y->values[0].type == FR_NONE;
}

/* A kCallFunc success: [Int type, value]. */
static void fr_call_result(const fr_reply_t* y, int64_t type, int32_t wire, uint64_t* handle) {
  FR_CHECK(y->count == 2 && y->values[0].type == FR_INT);
  FR_CHECK((int64_t)y->values[0].u == type);
  FR_CHECK(y->values[1].type == wire);
  if (handle != NULL) {
    *handle = y->values[1].u;
  }
}

static int fr_string_is(const fr_value_t* v, const char* s) {
  size_t n = strlen(s);
  return v->type == FR_RAW_STR && v->u == n && memcmp(v->bytes, s, n) == 0;
}

static void fr_check_call(const fr_request_t* q, const fr_reply_t* y, size_t cap) {
  uint64_t h = q->func;
  uint64_t got = 0;
  if (h == FR_H_SYSTEM_LIB) {
    fr_call_result(y, FR_MODULE, FR_PTR, &got);
    FR_CHECK(got == FR_H_MODULE);
  } else if (h == FR_H_MAX_PACKET_SIZE) {
    fr_call_result(y, FR_INT, FR_INT, &got);
    FR_CHECK(got == cap - 8u);
  } else if (h == FR_H_MODULE_GET_FUNCTION) {
    FR_CHECK(q->argc >= 2 && q->args[0].type == FR_MODULE && q->args[0].u == FR_H_MODULE);
    if (y->values[1].type == FR_NONE) {
      fr_call_result(y, FR_NONE, FR_NONE, NULL);
      for (unsigned i = 0; i < FR_NUM_FUNCS; i++) {
        FR_CHECK(!fr_string_is(&q->args[1], fr_func_names[i]));
      }
    } else {
      fr_call_result(y, FR_FUNCTION, FR_PTR, &got);
      FR_CHECK(got >= FR_H_KERNEL_BASE && got < FR_H_KERNEL_BASE + FR_NUM_FUNCS);
      FR_CHECK(fr_string_is(&q->args[1], fr_func_names[got - FR_H_KERNEL_BASE]));
    }
  } else if (h == FR_H_TIME_EVALUATOR) {
    fr_call_result(y, FR_FUNCTION, FR_PTR, &got);
    FR_CHECK(q->argc == 12 && q->args[5].type == FR_INT);
    FR_CHECK(got >= FR_H_TIMER_BASE && got < FR_H_TIMER_BASE + MTVG_RPC_MAX_TIMERS);
    unsigned i = (unsigned)(got - FR_H_TIMER_BASE);
    FR_CHECK(!fr_timer_live[i]);
    FR_CHECK(q->args[5].u <= MTVG_RPC_MAX_REPEAT);
    fr_timer_live[i] = 1;
    fr_timer_repeat[i] = q->args[5].u == 0 ? 1u : (uint32_t)q->args[5].u;
  } else if (h >= FR_H_KERNEL_BASE && h < FR_H_KERNEL_BASE + FR_NUM_FUNCS) {
    FR_CHECK(h == FR_H_KERNEL_BASE || h == FR_ECHO); /* fail and mute never succeed */
    FR_CHECK(y->count == 2 && y->values[0].type == FR_INT);
    int64_t type = (int64_t)y->values[0].u;
    FR_CHECK((type == FR_NONE && y->values[1].type == FR_NONE) ||
             (type == FR_INT && y->values[1].type == FR_INT) ||
             (type == FR_FLOAT && y->values[1].type == FR_FLOAT));
    if (type != FR_NONE) {
      FR_CHECK(h == FR_ECHO && q->argc > 0);
      FR_CHECK(y->values[1].u == q->args[0].u);
    }
  } else if (h >= FR_H_TIMER_BASE && h < FR_H_TIMER_BASE + MTVG_RPC_MAX_TIMERS) {
    unsigned i = (unsigned)(h - FR_H_TIMER_BASE);
    FR_CHECK(fr_timer_live[i]);
    fr_call_result(y, FR_BYTES, FR_BYTE_ARRAY, &got);
    FR_CHECK(got == 8u * fr_timer_repeat[i]);
    for (uint64_t k = 0; k < got; k += 8) {
      double s;
      memcpy(&s, y->values[1].bytes + k, sizeof(s));
      FR_CHECK(isfinite(s) && s >= 0.0);
    }
  } else {
    FR_CHECK(!"a call to a handle this server never gave out succeeded");
  }
}

static void fr_check_copy(const fr_request_t* q, const fr_reply_t* y, size_t cap) {
  const fr_header_t* t = &q->copy;
  int valid = q->well_formed && t->dev_type == 1 && t->dev_id == 0 &&
              fr_range_ok(t->data, t->byte_offset, q->copy_nbytes) &&
              (q->code == FR_COPY_TO || q->copy_nbytes <= cap - 12u);
  if (y->code == FR_EXCEPTION) {
    FR_CHECK(!valid);
    return;
  }
  FR_CHECK(valid);
  const uint8_t* mem = (const uint8_t*)(uintptr_t)t->data + t->byte_offset;
  if (q->code == FR_COPY_TO) {
    FR_CHECK(fr_is_none(y));
    FR_CHECK(memcmp(mem, q->copy_data, (size_t)q->copy_nbytes) == 0);
  } else {
    FR_CHECK(y->code == FR_COPY_ACK && y->body_len == q->copy_nbytes);
    FR_CHECK(memcmp(mem, y->body, y->body_len) == 0);
  }
}

static void fr_check_alloc(const fr_request_t* q, const fr_reply_t* y) {
  uint64_t size;
  if (q->code == FR_ALLOC_SCOPE) {
    FR_CHECK(q->argc == 2 && q->args[0].type == FR_DLTENSOR);
    const fr_header_t* t = &q->args[0].tensor;
    FR_CHECK(t->dev_type == 1 && t->dev_id == 0);
    size = fr_tensor_bytes(t->ndim, t->shape, t->bits, t->lanes);
  } else {
    FR_CHECK(q->argc == 4 && q->args[0].type == FR_DEVICE && q->args[1].type == FR_INT);
    size = q->args[1].u;
  }
  FR_CHECK(size <= MTVG_RPC_POOL_BYTES);
  size = size == 0 ? 1u : size;
  FR_CHECK(y->count == 1 && y->values[0].type == FR_PTR);
  uint64_t addr = y->values[0].u;
  FR_CHECK(addr != 0 && addr % FR_ALIGN == 0);
  FR_CHECK(fr_live_count < MTVG_RPC_MAX_ALLOCS && fr_live_count < FR_MAX_LIVE);
  for (unsigned i = 0; i < fr_live_count; i++) {
    FR_CHECK(addr + size <= fr_live[i].addr || fr_live[i].addr + fr_live[i].size <= addr);
  }
  fr_live[fr_live_count].addr = addr;
  fr_live[fr_live_count].size = size;
  fr_live_count++;
  if (fr_token_count < FR_MAX_TOKENS) {
    fr_tokens[fr_token_count++] = addr;
  }
}

static void fr_check_syscall(const fr_request_t* q, const fr_reply_t* y) {
  if (q->code == FR_FREE_DATA) {
    int live = q->well_formed && q->argc == 2 && q->args[1].type == FR_PTR &&
               fr_find_live(q->args[1].u) >= 0;
    FR_CHECK(live == (y->code == FR_RETURN));
    if (live) {
      int i = fr_find_live(q->args[1].u);
      fr_live[i] = fr_live[--fr_live_count];
    }
  }
  if (y->code == FR_EXCEPTION) {
    return;
  }
  FR_CHECK(y->count == 1);
  switch (q->code) {
    case FR_GET_GLOBAL: {
      static const char* const globals[4] = {"ffi.SystemLib", "tvm.rpc.server.ModuleGetFunction",
                                             "runtime.RPCTimeEvaluator",
                                             "tvm.rpc.server.GetCRTMaxPacketSize"};
      uint64_t want = 0;
      for (unsigned i = 0; i < 4; i++) {
        if (fr_string_is(&q->args[0], globals[i])) {
          want = FR_H_SYSTEM_LIB + i;
        }
      }
      FR_CHECK(y->values[0].type == FR_PTR && y->values[0].u == want);
      break;
    }
    case FR_FREE_HANDLE:
      FR_CHECK(fr_is_none(y) && q->argc == 1 && q->args[0].type == FR_PTR);
      if (q->args[0].u >= FR_H_TIMER_BASE &&
          q->args[0].u < FR_H_TIMER_BASE + MTVG_RPC_MAX_TIMERS) {
        fr_timer_live[q->args[0].u - FR_H_TIMER_BASE] = 0;
      }
      break;
    case FR_ALLOC:
    case FR_ALLOC_SCOPE:
      fr_check_alloc(q, y);
      break;
    case FR_GET_ATTR:
      FR_CHECK(y->values[0].type == FR_NONE || y->values[0].type == FR_INT);
      break;
    case FR_CREATE_STREAM:
    case FR_GET_STREAM:
      FR_CHECK(y->values[0].type == FR_PTR && y->values[0].u == 0);
      break;
    case FR_FREE_DATA:
    case FR_SET_DEVICE:
    case FR_STREAM_SYNC:
    case FR_FREE_STREAM:
    case FR_SET_STREAM:
      FR_CHECK(fr_is_none(y));
      break;
    default:
      FR_CHECK(!"an unsupported syscall succeeded");
  }
}

/* One line per exchange on stderr (FUZZ_RPC_TRACE=1). */
static void fr_trace(const fr_request_t* q, size_t n, const uint8_t* reply, size_t len) {
  fprintf(stderr, "#%u: code %d, %zu bytes%s -> ", fr_packet_index, (int)q->code, n,
          q->well_formed ? "" : " (malformed)");
  if (len < 12) {
    fprintf(stderr, "no reply\n");
    return;
  }
  fr_reply_t y;
  fr_parse_reply(reply, len, &y);
  if (y.code == FR_COPY_ACK) {
    fprintf(stderr, "CopyAck %zu bytes\n", y.body_len);
  } else if (y.code == FR_EXCEPTION) {
    fprintf(stderr, "Exception \"%.*s\"\n", (int)y.values[0].u, (const char*)y.values[0].bytes);
  } else {
    fprintf(stderr, "Return");
    for (uint32_t i = 0; i < y.count; i++) {
      fprintf(stderr, " [%d %#llx]", (int)y.values[i].type, (unsigned long long)y.values[i].u);
    }
    fprintf(stderr, "\n");
  }
}

/* Checks one exchange and updates the model. */
static void fr_check(const fr_request_t* q, const uint8_t* reply, size_t len, size_t cap) {
  FR_CHECK(len <= cap);
  int shutdown = q->code == FR_SHUTDOWN;
  FR_CHECK((len == 0) == shutdown);
  if (shutdown) {
    fr_model_reset();
    return;
  }
  fr_reply_t y;
  fr_parse_reply(reply, len, &y);
  if (!q->well_formed) {
    FR_CHECK(y.code == FR_EXCEPTION);
    return;
  }
  FR_CHECK(y.code != FR_COPY_ACK || q->code == FR_COPY_FROM);
  switch (q->code) {
    case FR_INIT:
      if (y.code == FR_RETURN) {
        FR_CHECK(fr_is_none(&y));
        fr_model_reset(); /* the server starts a new session */
      }
      return;
    case FR_CALL:
      if (y.code == FR_RETURN) {
        fr_check_call(q, &y, cap);
      }
      return;
    case FR_COPY_FROM:
    case FR_COPY_TO:
      fr_check_copy(q, &y, cap);
      return;
    default:
      if (q->code < FR_GET_GLOBAL) {
        FR_CHECK(y.code == FR_EXCEPTION);
        return;
      }
      fr_check_syscall(q, &y);
  }
}

/* ---- Driver ---------------------------------------------------------------------------------- */

/* Replaces tokens in the data-handle fields the decoder found; returns how many. */
static unsigned fr_rewrite_tokens(uint8_t* p, const fr_reader_t* fields) {
  unsigned done = 0;
  for (unsigned f = 0; f < fields->handles; f++) {
    uint8_t* at = p + fields->handle_at[f];
    uint64_t v = 0;
    for (unsigned k = 0; k < 8u; k++) {
      v |= (uint64_t)at[k] << (8u * k);
    }
    if (v >= FR_TOKEN_BASE && v < FR_TOKEN_BASE + fr_token_count) {
      uint64_t addr = fr_tokens[v - FR_TOKEN_BASE];
      for (unsigned k = 0; k < 8u; k++) {
        at[k] = (uint8_t)(addr >> (8u * k));
      }
      done++;
    }
  }
  return done;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  size_t cap = 64u * (1u + (data[0] & 7u));
  mtvg_rpc_reset();
  fr_model_reset();
  fr_token_count = 0;
  fr_calls = 0;
  fr_now = 0;
  fr_idle_reads = 0;
  fr_packet_index = 0;
  static int trace = -1;
  if (trace < 0) {
    trace = getenv("FUZZ_RPC_TRACE") != NULL;
  }
  uint8_t* reply = (uint8_t*)malloc(cap);
  FR_CHECK(reply != NULL);
  size_t pos = 1;
  while (size - pos >= 2u) {
    size_t n = (size_t)data[pos] | ((size_t)data[pos + 1] << 8);
    pos += 2;
    if (n > size - pos) {
      n = size - pos;
    }
    uint8_t* packet = (uint8_t*)malloc(n);
    FR_CHECK(packet != NULL);
    if (n > 0) {
      memcpy(packet, data + pos, n);
    }
    pos += n;
    fr_request_t q;
    fr_reader_t fields;
    fr_parse_request(packet, n, &q, &fields);
    if (fr_rewrite_tokens(packet, &fields) > 0) {
      fr_parse_request(packet, n, &q, &fields); /* again, with the real addresses */
    }
    size_t len = mtvg_rpc_handle(packet, n, reply, cap, cap);
    if (trace) {
      fr_trace(&q, n, reply, len <= cap ? len : 0);
    }
    fr_check(&q, reply, len, cap);
    FR_CHECK(mtvg_rpc_pool_used() == fr_model_used());
    FR_CHECK(mtvg_rpc_function_count() == FR_NUM_FUNCS);
    free(packet);
    fr_packet_index++;
  }
  free(reply);
  return 0;
}
