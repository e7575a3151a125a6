/*
 * microtvm-gen runtime: a TVM 0.27 RPC server for host-driven mode (mtvg/rpc_server.h).
 *
 * Wire facts (docs/host-driven.md): every integer is little-endian; a packet is u64 length,
 * i32 code, body; values are tvm-ffi type indices followed by their payload. Handles are
 * u64 values the server chooses: small constants for the built-in functions and the
 * module, base + index for kernels and timers, and the real address for tensor data.
 */
#include <string.h>

#include "dlpack/dlpack.h"
#include "mtvg/operator.h"
#include "mtvg/platform.h"
#include "mtvg/rpc_server.h"
#include "tvm/runtime/c_runtime_api.h"
#include "tvm/runtime/crt/module.h"

/* RPC codes. */
#define RPC_SHUTDOWN 1
#define RPC_INIT_SERVER 2
#define RPC_CALL_FUNC 3
#define RPC_RETURN 4
#define RPC_EXCEPTION 5
#define RPC_COPY_FROM_REMOTE 6
#define RPC_COPY_TO_REMOTE 7
#define RPC_COPY_ACK 8
#define RPC_GET_GLOBAL_FUNC 9
#define RPC_FREE_HANDLE 10
#define RPC_DEV_SET_DEVICE 11
#define RPC_DEV_GET_ATTR 12
#define RPC_DEV_ALLOC_DATA 13
#define RPC_DEV_FREE_DATA 14
#define RPC_DEV_STREAM_SYNC 15
#define RPC_DEV_ALLOC_DATA_WITH_SCOPE 17
#define RPC_DEV_CREATE_STREAM 18
#define RPC_DEV_FREE_STREAM 19
#define RPC_DEV_SET_STREAM 20
#define RPC_DEV_GET_CURRENT_STREAM 21

/* tvm-ffi type indices as they appear on the wire. */
#define T_NONE 0
#define T_INT 1
#define T_BOOL 2
#define T_FLOAT 3
#define T_PTR 4
#define T_DTYPE 5
#define T_DEVICE 6
#define T_DLTENSOR 7
#define T_RAW_STR 8
#define T_BYTE_ARRAY 9
#define T_SMALL_STR 11
#define T_SMALL_BYTES 12
#define T_OBJECT_FIRST 64
#define T_STR 65
#define T_BYTES 66
#define T_FUNCTION 68
#define T_MODULE 73
#define T_RPC_OBJECT 115

#define PROTOCOL_VERSION "0.8.0"
#define CPU_DEVICE_TYPE 1
#define ATTR_EXIST 0
#define ATTR_TOTAL_GLOBAL_MEMORY 14

/* Handles this server gives out. */
#define H_SYSTEM_LIB 0x10001u
#define H_MODULE_GET_FUNCTION 0x10002u
#define H_TIME_EVALUATOR 0x10003u
#define H_MAX_PACKET_SIZE 0x10004u
#define H_MODULE 0x20001u
#define H_KERNEL_BASE 0x30000u
#define H_TIMER_BASE 0x40000u
#define H_RANGE 0x10000u

#define PACKET_PREFIX_BYTES 8u
#define MESSAGE_BYTES 160u
#define TIME_EVALUATOR_ARGS 12u
/* time_evaluator's growth factor for `number` when min_repeat_ms is not reached: 1.618. */
#define GROWTH_PER_MILLE 1618u
#define NOT_AN_ARGUMENT 0xFFFFFFFFu

typedef struct {
  const uint8_t* p;
  size_t left;
  int bad;
} reader_t;

typedef struct {
  uint8_t* p;
  size_t cap;
  size_t used;
  int overflow;
} writer_t;

typedef struct {
  uint64_t data;
  int32_t device_type;
  int32_t device_id;
  int32_t ndim;
  DLDataType dtype;
  int64_t shape[MTVG_RPC_MAX_NDIM];
  uint64_t byte_offset;
} tensor_header_t;

typedef struct {
  int32_t type;     /* outer type index */
  int64_t v_int;    /* Int, Bool */
  double v_float;   /* Float */
  uint64_t handle;  /* OpaquePtr, Module, Function, RPCObjectRef */
  const uint8_t* bytes;
  uint64_t len;     /* strings and bytes */
  DLDataType dtype;
  int32_t dev_type;
  int32_t dev_id;
  uint32_t tensor;  /* index into call_tensors for DLTensorPtr */
} value_t;

typedef struct {
  uint32_t offset;
  uint32_t size;
} alloc_t;

typedef struct {
  int used;
  uint32_t kernel;
  uint32_t number;
  uint32_t repeat;
  uint32_t min_repeat_ms;
  uint32_t limit_zero_time_iterations;
  uint32_t cooldown_ms;
  uint32_t repeats_to_cooldown;
} evaluator_t;

static uint8_t pool[MTVG_RPC_POOL_BYTES] __attribute__((aligned(MTVG_RPC_TENSOR_ALIGN)));
static alloc_t allocs[MTVG_RPC_MAX_ALLOCS]; /* sorted by offset */
static uint32_t alloc_count;
static evaluator_t timers[MTVG_RPC_MAX_TIMERS];

/* Per call: decoded arguments and what the packed ABI gets. */
static value_t call_args[MTVG_RPC_MAX_ARGS];
static tensor_header_t call_tensors[MTVG_RPC_MAX_ARGS];
static DLTensor call_dl[MTVG_RPC_MAX_ARGS];
static TVMValue call_values[MTVG_RPC_MAX_ARGS];
static int call_codes[MTVG_RPC_MAX_ARGS];
static char call_strings[MTVG_RPC_STRING_BYTES];

static char message[MESSAGE_BYTES];
static size_t message_len;
/* The largest packet the link carries (u64 prefix included), from mtvg_rpc_handle(). */
static size_t link_max_packet;

/* ---- Messages --------------------------------------------------------------------------- */

static void msg_bytes(const void* data, size_t n) {
  const char* s = (const char*)data;
  for (size_t i = 0; i < n && message_len < sizeof(message); i++) {
    message[message_len++] = s[i];
  }
}

static void msg_text(const char* s) { msg_bytes(s, strlen(s)); }

static void msg_uint(uint64_t v) {
  char digits[20];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + (char)(v % 10u));
    v /= 10u;
  } while (v != 0 && n < sizeof(digits));
  while (n > 0) {
    msg_bytes(&digits[--n], 1);
  }
}

static void msg_start(const char* s) {
  message_len = 0;
  msg_text(s);
}

/* ---- Little-endian reader and writer ----------------------------------------------------- */

static const uint8_t* take(reader_t* r, size_t n) {
  if (r->bad || n > r->left) {
    r->bad = 1;
    return NULL;
  }
  const uint8_t* p = r->p;
  r->p += n;
  r->left -= n;
  return p;
}

static uint64_t get_uint(reader_t* r, size_t n) {
  const uint8_t* p = take(r, n);
  uint64_t v = 0;
  for (size_t i = 0; p != NULL && i < n; i++) {
    v |= (uint64_t)p[i] << (8u * i);
  }
  return v;
}

/* The n bytes a length field announced; a length beyond the packet marks it bad. */
static const uint8_t* take_counted(reader_t* r, uint64_t n) {
  return take(r, n > r->left ? r->left + 1u : (size_t)n);
}

static int32_t get_i32(reader_t* r) { return (int32_t)(uint32_t)get_uint(r, 4); }
static uint64_t get_u64(reader_t* r) { return get_uint(r, 8); }

static void put_uint(writer_t* w, uint64_t v, size_t n) {
  if (w->overflow || n > w->cap - w->used) {
    w->overflow = 1;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    w->p[w->used++] = (uint8_t)(v >> (8u * i));
  }
}

static void put_i32(writer_t* w, int32_t v) { put_uint(w, (uint32_t)v, 4); }
static void put_u64(writer_t* w, uint64_t v) { put_uint(w, v, 8); }

static void put_bytes(writer_t* w, const void* data, size_t n) {
  if (w->overflow || n > w->cap - w->used) {
    w->overflow = 1;
    return;
  }
  memcpy(w->p + w->used, data, n);
  w->used += n;
}

static void begin_packet(writer_t* w, int32_t code) {
  w->used = 0;
  w->overflow = 0;
  put_u64(w, 0); /* length, filled in by end_packet */
  put_i32(w, code);
}

static size_t end_packet(writer_t* w) {
  if (w->overflow) {
    return 0;
  }
  uint64_t n = w->used - PACKET_PREFIX_BYTES;
  for (size_t i = 0; i < PACKET_PREFIX_BYTES; i++) {
    w->p[i] = (uint8_t)(n >> (8u * i));
  }
  return w->used;
}

static void begin_return(writer_t* w, int32_t count) {
  begin_packet(w, RPC_RETURN);
  put_i32(w, count);
}

static void put_int_value(writer_t* w, int64_t v) {
  put_i32(w, T_INT);
  put_u64(w, (uint64_t)v);
}

static void put_ptr_value(writer_t* w, uint64_t v) {
  put_i32(w, T_PTR);
  put_u64(w, v);
}

static size_t reply_void(writer_t* w) {
  begin_return(w, 1);
  put_i32(w, T_NONE);
  return end_packet(w);
}

static size_t reply_ptr(writer_t* w, uint64_t v) {
  begin_return(w, 1);
  put_ptr_value(w, v);
  return end_packet(w);
}

/* kCallFunc results: [Int type_index, value]. */
static size_t reply_call(writer_t* w, int32_t type, uint64_t handle) {
  begin_return(w, 2);
  put_int_value(w, type);
  if (type == T_NONE) {
    put_i32(w, T_NONE);
  } else {
    put_ptr_value(w, handle);
  }
  return end_packet(w);
}

/* The exception packet: one RawStr with `message`. Always fits (cap >= 64). */
static size_t reply_exception(writer_t* w) {
  size_t room = w->cap - PACKET_PREFIX_BYTES - 4u - 4u - 4u - 8u;
  size_t n = message_len < room ? message_len : room;
  begin_packet(w, RPC_EXCEPTION);
  put_i32(w, 1);
  put_i32(w, T_RAW_STR);
  put_u64(w, n);
  put_bytes(w, message, n);
  return end_packet(w);
}

/* ---- Tensor pool ---------------------------------------------------------------------------- */

static uint64_t address_of(uint32_t offset) { return (uint64_t)(uintptr_t)(pool + offset); }

static uint32_t align_up(uint32_t v) {
  return (v + (MTVG_RPC_TENSOR_ALIGN - 1u)) & ~(uint32_t)(MTVG_RPC_TENSOR_ALIGN - 1u);
}

/* First fit in offset order. Returns the index of the new block, or -1. */
static int pool_alloc(uint64_t nbytes) {
  if (nbytes > MTVG_RPC_POOL_BYTES) {
    return -1;
  }
  uint32_t size = nbytes == 0 ? 1u : (uint32_t)nbytes;
  if (alloc_count == MTVG_RPC_MAX_ALLOCS) {
    return -1;
  }
  uint32_t start = 0;
  for (uint32_t i = 0; i <= alloc_count; i++) {
    uint32_t end = i < alloc_count ? allocs[i].offset : (uint32_t)MTVG_RPC_POOL_BYTES;
    if (start <= end && size <= end - start) {
      memmove(&allocs[i + 1], &allocs[i], (alloc_count - i) * sizeof(allocs[0]));
      allocs[i].offset = start;
      allocs[i].size = size;
      alloc_count++;
      return (int)i;
    }
    if (i < alloc_count) {
      uint64_t next = (uint64_t)allocs[i].offset + allocs[i].size;
      start = next > MTVG_RPC_POOL_BYTES ? (uint32_t)MTVG_RPC_POOL_BYTES : align_up((uint32_t)next);
    }
  }
  return -1;
}

static int pool_find(uint64_t data) {
  for (uint32_t i = 0; i < alloc_count; i++) {
    if (address_of(allocs[i].offset) == data) {
      return (int)i;
    }
  }
  return MTVG_FAILED;
}

static void pool_free(uint32_t i) {
  memmove(&allocs[i], &allocs[i + 1], (alloc_count - i - 1u) * sizeof(allocs[0]));
  alloc_count--;
}

size_t mtvg_rpc_pool_used(void) {
  size_t used = 0;
  for (uint32_t i = 0; i < alloc_count; i++) {
    used += allocs[i].size;
  }
  return used;
}

void mtvg_rpc_reset(void) {
  alloc_count = 0;
  memset(timers, 0, sizeof(timers));
}

const char* mtvg_rpc_banner(void) {
  msg_start("rpc server: ");
  msg_uint(mtvg_rpc_function_count());
  msg_text(" functions, ");
  msg_uint(MTVG_RPC_POOL_BYTES);
  msg_text(" bytes of tensor memory");
  message[message_len < sizeof(message) ? message_len : sizeof(message) - 1u] = '\0';
  return message;
}

/* ---- System library --------------------------------------------------------------------- */

static const TVMFuncRegistry* registry(void) {
  const TVMModule* mod = TVMSystemLibEntryPoint();
  return mod == NULL ? NULL : mod->registry;
}

uint32_t mtvg_rpc_function_count(void) {
  const TVMFuncRegistry* reg = registry();
  if (reg == NULL || reg->names == NULL) {
    return 0;
  }
  return (uint32_t)(uint8_t)reg->names[0] | ((uint32_t)(uint8_t)reg->names[1] << 8);
}

/* The i-th name of the registry. */
static const char* function_name(uint32_t index) {
  const char* name = registry()->names + 2;
  for (uint32_t i = 0; i < index; i++) {
    name += strlen(name) + 1u;
  }
  return name;
}

static int find_function(const uint8_t* name, uint64_t len, uint32_t* index) {
  uint32_t count = mtvg_rpc_function_count();
  const char* candidate = count > 0 ? registry()->names + 2 : NULL;
  for (uint32_t i = 0; i < count; i++) {
    size_t n = strlen(candidate);
    if (n == len && memcmp(candidate, name, n) == 0) {
      *index = i;
      return 1;
    }
    candidate += n + 1u;
  }
  return 0;
}

/* ---- Decoding values -------------------------------------------------------------------- */

static int read_tensor_header(reader_t* r, tensor_header_t* t) {
  t->data = get_u64(r);
  t->device_type = get_i32(r);
  t->device_id = get_i32(r);
  t->ndim = get_i32(r);
  t->dtype.code = (uint8_t)get_uint(r, 1);
  t->dtype.bits = (uint8_t)get_uint(r, 1);
  t->dtype.lanes = (uint16_t)get_uint(r, 2);
  if (r->bad) {
    return MTVG_FAILED;
  }
  if (t->ndim < 0 || t->ndim > (int32_t)MTVG_RPC_MAX_NDIM) {
    msg_start("tensor with ");
    msg_uint((uint64_t)(uint32_t)t->ndim);
    msg_text(" dimensions; the device takes at most MTVG_RPC_MAX_NDIM");
    r->bad = 1;
    return MTVG_FAILED;
  }
  for (int32_t i = 0; i < t->ndim; i++) {
    t->shape[i] = (int64_t)get_u64(r);
  }
  t->byte_offset = get_u64(r);
  return r->bad ? MTVG_FAILED : MTVG_OK;
}

/* Size in bytes of a compact tensor, or -1 if a dimension is negative or it overflows. */
static int64_t tensor_bytes(const tensor_header_t* t) {
  uint64_t count = 1;
  for (int32_t i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0) {
      return -1;
    }
    uint64_t d = (uint64_t)t->shape[i];
    if (d != 0 && count > (uint64_t)MTVG_RPC_POOL_BYTES / d) {
      return -1;
    }
    count *= d;
  }
  uint64_t elem = ((uint64_t)t->dtype.bits * t->dtype.lanes + 7u) / 8u;
  if (elem != 0 && count > (uint64_t)MTVG_RPC_POOL_BYTES / elem) {
    return -1;
  }
  return (int64_t)(count * elem);
}

static int read_value(reader_t* r, value_t* v, uint32_t slot) {
  v->type = get_i32(r);
  if (r->bad) {
    return MTVG_FAILED;
  }
  int32_t type = v->type;
  if (type == T_SMALL_STR || type == T_SMALL_BYTES ||
      (type >= T_OBJECT_FIRST && type != T_FUNCTION && type != T_MODULE)) {
    int32_t inner = get_i32(r); /* object form: the inner index, then its payload */
    if (inner == T_STR || inner == T_BYTES) {
      v->type = inner == T_STR ? T_RAW_STR : T_BYTE_ARRAY;
      v->len = get_u64(r);
      v->bytes = take_counted(r, v->len);
    } else if (inner == T_RPC_OBJECT) {
      v->type = T_RPC_OBJECT;
      v->handle = get_u64(r);
    } else {
      r->bad = 1;
    }
    return r->bad ? MTVG_FAILED : MTVG_OK;
  }
  switch (type) {
    case T_NONE:
      break;
    case T_INT:
    case T_BOOL:
      v->v_int = (int64_t)get_u64(r);
      break;
    case T_FLOAT: {
      uint64_t bits = get_u64(r);
      memcpy(&v->v_float, &bits, sizeof(bits));
      break;
    }
    case T_PTR:
    case T_FUNCTION:
    case T_MODULE:
      v->handle = get_u64(r);
      break;
    case T_DTYPE:
      v->dtype.code = (uint8_t)get_uint(r, 1);
      v->dtype.bits = (uint8_t)get_uint(r, 1);
      v->dtype.lanes = (uint16_t)get_uint(r, 2);
      (void)get_uint(r, 4);
      break;
    case T_DEVICE:
      v->dev_type = get_i32(r);
      v->dev_id = get_i32(r);
      break;
    case T_DLTENSOR:
      v->tensor = slot;
      return read_tensor_header(r, &call_tensors[slot]);
    case T_RAW_STR:
    case T_BYTE_ARRAY:
      v->len = get_u64(r);
      v->bytes = take_counted(r, v->len);
      break;
    default:
      r->bad = 1;
      break;
  }
  return r->bad ? MTVG_FAILED : MTVG_OK;
}

/* Reads a packed sequence into call_args; the packet must end right after it. */
static int read_args(reader_t* r, uint32_t* count) {
  int32_t n = get_i32(r);
  if (r->bad || n < 0) {
    return MTVG_FAILED;
  }
  if (n > (int32_t)MTVG_RPC_MAX_ARGS) {
    msg_start("call with ");
    msg_uint((uint64_t)n);
    msg_text(" arguments; the device takes at most MTVG_RPC_MAX_ARGS");
    return MTVG_FAILED;
  }
  for (int32_t i = 0; i < n; i++) {
    memset(&call_args[i], 0, sizeof(call_args[i]));
    if (read_value(r, &call_args[i], (uint32_t)i) != 0) {
      return MTVG_FAILED;
    }
  }
  if (r->left != 0) {
    return MTVG_FAILED;
  }
  *count = (uint32_t)n;
  return 0;
}

static int is_string(const value_t* v) { return v->type == T_RAW_STR; }

static int string_equals(const value_t* v, const char* s) {
  size_t n = strlen(s);
  return is_string(v) && v->len == n && memcmp(v->bytes, s, n) == 0;
}

/* ---- Checking tensors against the pool ---------------------------------------------------- */

/* The allocation that holds [byte_offset, byte_offset + nbytes) of a tensor's data. */
static void msg_what(const char* what, uint32_t arg) {
  msg_start(what);
  if (arg != NOT_AN_ARGUMENT) {
    msg_text(" ");
    msg_uint(arg);
  }
}

static int check_range(const tensor_header_t* t, uint64_t nbytes, const char* what,
                       uint32_t arg) {
  if (t->device_type != CPU_DEVICE_TYPE || t->device_id != 0) {
    msg_what(what, arg);
    msg_text(": the device has only cpu(0)");
    return MTVG_FAILED;
  }
  int i = pool_find(t->data);
  if (i < 0) {
    msg_what(what, arg);
    msg_text(": data handle is not a live tensor of this session");
    return MTVG_FAILED;
  }
  if (t->byte_offset > allocs[i].size || nbytes > allocs[i].size - t->byte_offset) {
    msg_what(what, arg);
    msg_text(": bytes ");
    msg_uint(t->byte_offset);
    msg_text("..+");
    msg_uint(nbytes);
    msg_text(" lie outside the tensor's ");
    msg_uint(allocs[i].size);
    msg_text(" bytes");
    return MTVG_FAILED;
  }
  return 0;
}

/* ---- Calls ------------------------------------------------------------------------------------ */

/* Turns call_args[0..n) into the legacy packed ABI's values and type codes. */
static int pack_call(uint32_t n) {
  size_t strings_used = 0;
  for (uint32_t i = 0; i < n; i++) {
    value_t* v = &call_args[i];
    switch (v->type) {
      case T_NONE:
        call_values[i].v_handle = NULL;
        call_codes[i] = kTVMNullptr;
        break;
      case T_INT:
      case T_BOOL:
        call_values[i].v_int64 = v->v_int;
        call_codes[i] = kDLInt;
        break;
      case T_FLOAT:
        call_values[i].v_float64 = v->v_float;
        call_codes[i] = kDLFloat;
        break;
      case T_DLTENSOR: {
        tensor_header_t* t = &call_tensors[v->tensor];
        int64_t bytes = tensor_bytes(t);
        if (bytes < 0) {
          msg_start("argument ");
          msg_uint(i);
          msg_text(": shape is negative or too large");
          return MTVG_FAILED;
        }
        if (check_range(t, (uint64_t)bytes, "argument", i) != 0) {
          return MTVG_FAILED;
        }
        DLTensor* dl = &call_dl[i];
        dl->data = (void*)(uintptr_t)t->data;
        dl->device.device_type = kDLCPU;
        dl->device.device_id = 0;
        dl->ndim = t->ndim;
        dl->dtype = t->dtype;
        dl->shape = t->shape;
        dl->strides = NULL;
        dl->byte_offset = t->byte_offset;
        call_values[i].v_handle = dl;
        call_codes[i] = kTVMDLTensorHandle;
        break;
      }
      case T_RAW_STR:
        if (v->len >= sizeof(call_strings) - strings_used) {
          msg_start("string arguments longer than MTVG_RPC_STRING_BYTES");
          return MTVG_FAILED;
        }
        memcpy(call_strings + strings_used, v->bytes, (size_t)v->len);
        call_strings[strings_used + (size_t)v->len] = '\0';
        call_values[i].v_str = call_strings + strings_used;
        call_codes[i] = kTVMStr;
        strings_used += (size_t)v->len + 1u;
        break;
      default:
        msg_start("argument ");
        msg_uint(i);
        msg_text(": type index ");
        msg_uint((uint64_t)(uint32_t)v->type);
        msg_text(" cannot be passed to a device function");
        return MTVG_FAILED;
    }
  }
  return 0;
}

/* Calls function `kernel` of the registry on the unpacked call; `binding` (or NULL) is its
 * resource_handle: an operator archive's entry binds its kernel there (mtvg/operator.h). */
static int invoke_with(uint32_t kernel, uint32_t n, TVMValue* ret, int* ret_code,
                       mtvg_op_binding_t* binding) {
  TVMAPISetLastError("");
  *ret_code = kTVMNullptr;
  int status =
      registry()->funcs[kernel](call_values, call_codes, (int)n, ret, ret_code, binding);
  if (status != 0) {
    const char* err = TVMGetLastError();
    if (err[0] != '\0') {
      msg_start(err);
    } else {
      msg_start(function_name(kernel));
      msg_text(": failed");
    }
  }
  return status;
}

static int invoke(uint32_t kernel, uint32_t n, TVMValue* ret, int* ret_code) {
  return invoke_with(kernel, n, ret, ret_code, NULL);
}

static size_t call_kernel(writer_t* w, uint32_t kernel, uint32_t n) {
  TVMValue ret;
  int ret_code;
  if (pack_call(n) != 0 || invoke(kernel, n, &ret, &ret_code) != 0) {
    return reply_exception(w);
  }
  begin_return(w, 2);
  if (ret_code == kDLInt) {
    put_int_value(w, T_INT);
    put_int_value(w, ret.v_int64);
  } else if (ret_code == kDLFloat) {
    uint64_t bits;
    memcpy(&bits, &ret.v_float64, sizeof(bits));
    put_int_value(w, T_FLOAT);
    put_i32(w, T_FLOAT);
    put_u64(w, bits);
  } else {
    put_int_value(w, T_NONE);
    put_i32(w, T_NONE);
  }
  return end_packet(w);
}

/* ---- time_evaluator ------------------------------------------------------------------------ */

static int arg_uint(uint32_t i, uint32_t max, uint32_t* out) {
  if (call_args[i].type != T_INT || call_args[i].v_int < 0 || call_args[i].v_int > (int64_t)max) {
    msg_start("runtime.RPCTimeEvaluator: argument ");
    msg_uint(i);
    msg_text(" must be an integer from 0 to ");
    msg_uint(max);
    return MTVG_FAILED;
  }
  *out = (uint32_t)call_args[i].v_int;
  return 0;
}

static size_t create_timer(writer_t* w, uint32_t n) {
  if (n != TIME_EVALUATOR_ARGS) {
    msg_start("runtime.RPCTimeEvaluator takes 12 arguments");
    return reply_exception(w);
  }
  uint32_t kernel = 0;
  if (call_args[0].type != T_MODULE || call_args[0].handle != H_MODULE ||
      !is_string(&call_args[1]) || !find_function(call_args[1].bytes, call_args[1].len, &kernel)) {
    msg_start("runtime.RPCTimeEvaluator: no such function in the system library");
    return reply_exception(w);
  }
  evaluator_t t = {.used = 1, .kernel = kernel};
  uint32_t dev_type = 0;
  uint32_t dev_id = 0;
  uint32_t cache_flush = 0;
  if (arg_uint(2, 0xFFFF, &dev_type) != 0 || arg_uint(3, 0xFFFF, &dev_id) != 0 ||
      arg_uint(4, MTVG_RPC_MAX_NUMBER, &t.number) != 0 ||
      arg_uint(5, MTVG_RPC_MAX_REPEAT, &t.repeat) != 0 ||
      arg_uint(6, 0x7FFFFFFF, &t.min_repeat_ms) != 0 ||
      arg_uint(7, 0x7FFFFFFF, &t.limit_zero_time_iterations) != 0 ||
      arg_uint(8, 0x7FFFFFFF, &t.cooldown_ms) != 0 ||
      arg_uint(9, 0x7FFFFFFF, &t.repeats_to_cooldown) != 0 ||
      arg_uint(10, 0x7FFFFFFF, &cache_flush) != 0) {
    return reply_exception(w);
  }
  if (dev_type != CPU_DEVICE_TYPE || dev_id != 0) {
    msg_start("runtime.RPCTimeEvaluator: the device has only cpu(0)");
    return reply_exception(w);
  }
  if (cache_flush != 0 || !is_string(&call_args[11]) || call_args[11].len != 0) {
    msg_start("runtime.RPCTimeEvaluator: cache_flush_bytes and f_preproc are not supported");
    return reply_exception(w);
  }
  if (t.number == 0) {
    t.number = 1;
  }
  if (t.repeat == 0) {
    t.repeat = 1;
  }
  for (uint32_t i = 0; i < MTVG_RPC_MAX_TIMERS; i++) {
    if (!timers[i].used) {
      timers[i] = t;
      return reply_call(w, T_FUNCTION, H_TIMER_BASE + i);
    }
  }
  msg_start("more than MTVG_RPC_MAX_TIMERS time evaluators alive");
  return reply_exception(w);
}

static void busy_wait_ms(uint32_t ms) {
  uint64_t until = mtvg_timer_ticks() + (mtvg_timer_hz() / 1000u) * ms;
  while (mtvg_timer_ticks() < until) {
  }
}

/* Calls the kernel `number` times per measurement; one f64 (seconds per call) a repeat.
 * The untimed warm-up call goes through the packed entry, which checks the arguments; an
 * operator archive's entry then binds its kernel to them, and the timed calls run the kernel
 * alone. Other functions are timed through their packed entry. */
static size_t run_timer(writer_t* w, const evaluator_t* t, uint32_t n) {
  TVMValue ret;
  int ret_code;
  void* bound_data[MTVG_RPC_MAX_ARGS];
  mtvg_op_binding_t bound = {MTVG_OP_BINDING_MAGIC, MTVG_RPC_MAX_ARGS, bound_data, NULL};
  if (pack_call(n) != 0 || invoke_with(t->kernel, n, &ret, &ret_code, &bound) != 0) {
    return reply_exception(w);
  }
  const uint64_t hz = mtvg_timer_hz();
  uint32_t number = t->number;
  begin_return(w, 2);
  put_int_value(w, T_BYTES);
  put_i32(w, T_BYTE_ARRAY);
  put_u64(w, 8u * (uint64_t)t->repeat);
  for (uint32_t r = 0; r < t->repeat; r++) {
    uint64_t ticks = 0;
    uint32_t zero_readings = 0;
    for (;;) {
      mtvg_timer_align();
      uint64_t start = mtvg_timer_ticks();
      if (bound.run != NULL) {
        for (uint32_t k = 0; k < number; k++) {
          bound.run(bound_data);
        }
      } else {
        for (uint32_t k = 0; k < number; k++) {
          if (invoke(t->kernel, n, &ret, &ret_code) != 0) {
            return reply_exception(w);
          }
        }
      }
      ticks = mtvg_timer_ticks() - start;
      if (t->min_repeat_ms == 0 || ticks * 1000u >= (uint64_t)t->min_repeat_ms * hz) {
        break;
      }
      if (ticks == 0 && ++zero_readings >= t->limit_zero_time_iterations) {
        break;
      }
      uint64_t grown = (uint64_t)number * GROWTH_PER_MILLE / 1000u;
      if (ticks != 0) {
        /* In double: min_repeat_ms * hz * number overflows u64 with a GHz timer. */
        double needed = (double)t->min_repeat_ms * (double)hz / 1000.0 * (double)number /
                        (double)ticks + 1.0;
        if (needed > (double)grown) {
          grown = needed >= (double)MTVG_RPC_MAX_NUMBER ? MTVG_RPC_MAX_NUMBER
                                                        : (uint64_t)needed;
        }
      }
      if (number >= MTVG_RPC_MAX_NUMBER) {
        break;
      }
      if (grown > MTVG_RPC_MAX_NUMBER) {
        number = MTVG_RPC_MAX_NUMBER;
      } else {
        number = grown > number ? (uint32_t)grown : number + 1u;
      }
    }
    double seconds = (double)ticks / (double)hz / (double)number;
    uint64_t bits;
    memcpy(&bits, &seconds, sizeof(bits));
    put_u64(w, bits);
    if (t->cooldown_ms != 0 && t->repeats_to_cooldown != 0 &&
        (r + 1u) % t->repeats_to_cooldown == 0) {
      busy_wait_ms(t->cooldown_ms);
    }
  }
  return end_packet(w);
}

/* ---- Requests ---------------------------------------------------------------------------- */

static size_t handle_call(reader_t* r, writer_t* w) {
  uint64_t h = get_u64(r);
  uint32_t n = 0;
  if (r->bad || read_args(r, &n) != 0) {
    return 0;
  }
  switch (h) {
    case H_SYSTEM_LIB:
      return reply_call(w, T_MODULE, H_MODULE);
    case H_MAX_PACKET_SIZE:
      begin_return(w, 2);
      put_int_value(w, T_INT);
      put_int_value(w, (int64_t)(link_max_packet - PACKET_PREFIX_BYTES));
      return end_packet(w);
    case H_MODULE_GET_FUNCTION: {
      uint32_t index = 0;
      if (n < 2 || call_args[0].type != T_MODULE || call_args[0].handle != H_MODULE ||
          !is_string(&call_args[1])) {
        msg_start("tvm.rpc.server.ModuleGetFunction expects (the system library, name, bool)");
        return reply_exception(w);
      }
      if (!find_function(call_args[1].bytes, call_args[1].len, &index)) {
        return reply_call(w, T_NONE, 0);
      }
      return reply_call(w, T_FUNCTION, H_KERNEL_BASE + index);
    }
    case H_TIME_EVALUATOR:
      return create_timer(w, n);
    default:
      break;
  }
  if (h >= H_KERNEL_BASE && h < H_KERNEL_BASE + mtvg_rpc_function_count()) {
    return call_kernel(w, (uint32_t)(h - H_KERNEL_BASE), n);
  }
  if (h >= H_TIMER_BASE && h < H_TIMER_BASE + MTVG_RPC_MAX_TIMERS &&
      timers[h - H_TIMER_BASE].used) {
    return run_timer(w, &timers[h - H_TIMER_BASE], n);
  }
  msg_start("no function with this handle (freed, or from an earlier session)");
  return reply_exception(w);
}

static size_t handle_get_global(writer_t* w, uint32_t n) {
  if (n != 1 || !is_string(&call_args[0])) {
    return 0;
  }
  static const struct {
    const char* name;
    uint32_t handle;
  } globals[] = {
      {"ffi.SystemLib", H_SYSTEM_LIB},
      {"tvm.rpc.server.ModuleGetFunction", H_MODULE_GET_FUNCTION},
      {"runtime.RPCTimeEvaluator", H_TIME_EVALUATOR},
      {"tvm.rpc.server.GetCRTMaxPacketSize", H_MAX_PACKET_SIZE},
  };
  for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++) {
    if (string_equals(&call_args[0], globals[i].name)) {
      return reply_ptr(w, globals[i].handle);
    }
  }
  /* The functions `serve --accept-firmware` answers in the bridge: say how to get them. */
  static const char* const firmware_globals[] = {"tvm.rpc.server.upload",
                                                 "tvm.rpc.server.load_module"};
  for (size_t i = 0; i < sizeof(firmware_globals) / sizeof(firmware_globals[0]); i++) {
    if (string_equals(&call_args[0], firmware_globals[i])) {
      msg_start(firmware_globals[i]);
      msg_text(": this device does not take new firmware (start 'microtvm-gen serve' with "
               "--accept-firmware)");
      return reply_exception(w);
    }
  }
  return reply_ptr(w, 0);
}

static size_t alloc_reply(writer_t* w, uint64_t nbytes) {
  int i = pool_alloc(nbytes);
  if (i < 0) {
    msg_start("out of device tensor memory: ");
    msg_uint(nbytes);
    msg_text(" bytes wanted, ");
    msg_uint(MTVG_RPC_POOL_BYTES - mtvg_rpc_pool_used());
    msg_text(" free of MTVG_RPC_POOL_BYTES=");
    msg_uint(MTVG_RPC_POOL_BYTES);
    return reply_exception(w);
  }
  return reply_ptr(w, address_of(allocs[i].offset));
}

static int is_cpu(const value_t* v) {
  return v->type == T_DEVICE && v->dev_type == CPU_DEVICE_TYPE && v->dev_id == 0;
}

static size_t handle_syscall(int32_t code, writer_t* w, uint32_t n) {
  switch (code) {
    case RPC_GET_GLOBAL_FUNC:
      return handle_get_global(w, n);
    case RPC_FREE_HANDLE:
      if (n != 1 || call_args[0].type != T_PTR) {
        return 0;
      }
      if (call_args[0].handle >= H_TIMER_BASE && call_args[0].handle < H_TIMER_BASE + H_RANGE &&
          call_args[0].handle - H_TIMER_BASE < MTVG_RPC_MAX_TIMERS) {
        timers[call_args[0].handle - H_TIMER_BASE].used = 0;
      }
      return reply_void(w);
    case RPC_DEV_ALLOC_DATA_WITH_SCOPE: {
      if (n != 2 || call_args[0].type != T_DLTENSOR) {
        return 0;
      }
      const tensor_header_t* t = &call_tensors[0];
      if (call_args[1].type != T_NONE && !string_equals(&call_args[1], "global")) {
        msg_start("memory scopes other than \"global\" do not exist on the device");
        return reply_exception(w);
      }
      if (t->device_type != CPU_DEVICE_TYPE || t->device_id != 0) {
        msg_start("the device has only cpu(0)");
        return reply_exception(w);
      }
      int64_t bytes = tensor_bytes(t);
      if (bytes < 0) {
        msg_start("tensor shape is negative or larger than MTVG_RPC_POOL_BYTES");
        return reply_exception(w);
      }
      return alloc_reply(w, (uint64_t)bytes);
    }
    case RPC_DEV_ALLOC_DATA: {
      if (n != 4 || !is_cpu(&call_args[0]) || call_args[1].type != T_INT ||
          call_args[2].type != T_INT) {
        return 0;
      }
      int64_t align = call_args[2].v_int;
      if (call_args[1].v_int < 0 || align <= 0 || align > (int64_t)MTVG_RPC_TENSOR_ALIGN ||
          (align & (align - 1)) != 0) {
        msg_start("DevAllocData: bad size or alignment");
        return reply_exception(w);
      }
      return alloc_reply(w, (uint64_t)call_args[1].v_int);
    }
    case RPC_DEV_FREE_DATA: {
      if (n != 2 || call_args[1].type != T_PTR) {
        return 0;
      }
      int i = pool_find(call_args[1].handle);
      if (i < 0) {
        msg_start("DevFreeData: no tensor at this address");
        return reply_exception(w);
      }
      pool_free((uint32_t)i);
      return reply_void(w);
    }
    case RPC_DEV_GET_ATTR:
      if (n != 2 || call_args[1].type != T_INT) {
        return 0;
      }
      if (call_args[1].v_int == ATTR_EXIST || call_args[1].v_int == ATTR_TOTAL_GLOBAL_MEMORY) {
        begin_return(w, 1);
        put_int_value(w, call_args[1].v_int == ATTR_EXIST ? 1 : (int64_t)MTVG_RPC_POOL_BYTES);
        return end_packet(w);
      }
      return reply_void(w);
    case RPC_DEV_SET_DEVICE:
    case RPC_DEV_STREAM_SYNC:
    case RPC_DEV_FREE_STREAM:
    case RPC_DEV_SET_STREAM:
      return reply_void(w);
    case RPC_DEV_CREATE_STREAM:
    case RPC_DEV_GET_CURRENT_STREAM:
      return reply_ptr(w, 0);
    default:
      msg_start("RPC code ");
      msg_uint((uint64_t)(uint32_t)code);
      msg_text(" is not supported by the device");
      return reply_exception(w);
  }
}

static size_t handle_copy(int32_t code, reader_t* r, writer_t* w) {
  tensor_header_t* t = &call_tensors[0];
  if (read_tensor_header(r, t) != 0) {
    return 0;
  }
  uint64_t nbytes = get_u64(r);
  if (r->bad) {
    return 0;
  }
  if (code == RPC_COPY_TO_REMOTE) {
    if (nbytes != r->left) {
      return 0;
    }
    if (check_range(t, nbytes, "CopyToRemote", NOT_AN_ARGUMENT) != 0) {
      return reply_exception(w);
    }
    memcpy((uint8_t*)(uintptr_t)t->data + t->byte_offset, r->p, (size_t)nbytes);
    return reply_void(w);
  }
  if (r->left != 0) {
    return 0;
  }
  if (check_range(t, nbytes, "CopyFromRemote", NOT_AN_ARGUMENT) != 0) {
    return reply_exception(w);
  }
  if (nbytes > w->cap - PACKET_PREFIX_BYTES - 4u) {
    msg_start("CopyFromRemote: piece larger than the link's packet size");
    return reply_exception(w);
  }
  begin_packet(w, RPC_COPY_ACK);
  put_bytes(w, (const uint8_t*)(uintptr_t)t->data + t->byte_offset, (size_t)nbytes);
  return end_packet(w);
}

static size_t handle_init(reader_t* r, writer_t* w) {
  uint64_t len = get_u64(r);
  const uint8_t* version = take_counted(r, len);
  uint32_t n = 0;
  if (r->bad || read_args(r, &n) != 0) {
    return 0;
  }
  if (len != strlen(PROTOCOL_VERSION) || memcmp(version, PROTOCOL_VERSION, (size_t)len) != 0 ||
      n != 0) {
    msg_start("the device speaks RPC protocol " PROTOCOL_VERSION
              " without a session constructor");
    return reply_exception(w);
  }
  mtvg_rpc_reset();
  return reply_void(w);
}

static size_t dispatch(int32_t code, reader_t* r, writer_t* w) {
  uint32_t n = 0;
  switch (code) {
    case RPC_INIT_SERVER:
      return handle_init(r, w);
    case RPC_CALL_FUNC:
      return handle_call(r, w);
    case RPC_COPY_FROM_REMOTE:
    case RPC_COPY_TO_REMOTE:
      return handle_copy(code, r, w);
    case RPC_RETURN:
    case RPC_EXCEPTION:
    case RPC_COPY_ACK:
      msg_start("RPC code ");
      msg_uint((uint64_t)code);
      msg_text(" is a reply, not a request");
      return reply_exception(w);
    default:
      if (code < RPC_GET_GLOBAL_FUNC || code > RPC_DEV_GET_CURRENT_STREAM) {
        msg_start("RPC code ");
        msg_uint((uint64_t)(uint32_t)code);
        msg_text(" is not supported by the device");
        return reply_exception(w);
      }
      if (read_args(r, &n) != 0) {
        return 0;
      }
      return handle_syscall(code, w, n);
  }
}

static const char* code_name(int32_t code) {
  switch (code) {
    case RPC_INIT_SERVER: return "InitServer";
    case RPC_CALL_FUNC: return "CallFunc";
    case RPC_COPY_FROM_REMOTE: return "CopyFromRemote";
    case RPC_COPY_TO_REMOTE: return "CopyToRemote";
    case RPC_GET_GLOBAL_FUNC: return "GetGlobalFunc";
    case RPC_FREE_HANDLE: return "FreeHandle";
    case RPC_DEV_ALLOC_DATA_WITH_SCOPE: return "DevAllocDataWithScope";
    case RPC_DEV_FREE_DATA: return "DevFreeData";
    default: return "request";
  }
}

size_t mtvg_rpc_refuse_packet(uint64_t nbytes, uint8_t* reply, size_t cap, size_t max_packet) {
  writer_t w = {.p = reply, .cap = cap, .used = 0, .overflow = 0};
  msg_start("packet of ");
  msg_uint(nbytes);
  msg_text(" bytes does not fit the device link (");
  msg_uint(max_packet);
  msg_text(" bytes at most); tensor copies are split to fit, calls must be smaller");
  return reply_exception(&w);
}

size_t mtvg_rpc_handle(const uint8_t* packet, size_t n, uint8_t* reply, size_t cap,
                       size_t max_packet) {
  writer_t w = {.p = reply, .cap = cap, .used = 0, .overflow = 0};
  reader_t r = {.p = packet, .left = n, .bad = 0};
  uint64_t declared = get_u64(&r);
  int32_t code = get_i32(&r);
  message_len = 0;
  link_max_packet = max_packet;
  if (r.bad || declared != n - PACKET_PREFIX_BYTES) {
    msg_start("malformed packet: its length field does not match the message");
    return reply_exception(&w);
  }
  if (code == RPC_SHUTDOWN) {
    mtvg_rpc_reset();
    return 0;
  }
  size_t out = dispatch(code, &r, &w);
  if (out == 0) {
    if (w.overflow) {
      msg_start("the reply does not fit the device's packet buffer");
    } else if (message_len == 0) {
      msg_start("malformed ");
      msg_text(code_name(code));
      msg_text(" packet");
    }
    return reply_exception(&w);
  }
  return out;
}
