/*
 * microtvm-gen runtime: reading a params blob (`tvm.runtime.save_param_dict` format) in
 * place, and binding it to a parsed graph (mtvg/graph.h).
 *
 * Layout, all little-endian: u64 list magic, u64 reserved, u64 count N, N names as
 * u64 length + bytes, u64 tensor count (= N), then N tensor records: u64 magic,
 * u64 reserved, i32 device type, i32 device id, i32 ndim, u8 code, u8 bits, u16 lanes,
 * i64 shape[ndim], i64 data bytes, data. The i-th name belongs to the i-th tensor.
 */
#include <string.h>

#include "mtvg/graph.h"
#include "mtvg/runtime.h"

#define PARAMS_LIST_MAGIC 0xF7E58D4F05049CB7ull
#define PARAMS_TENSOR_MAGIC 0xDD5E40F096B4A13Full
#define PARAMS_HEADER_BYTES 24u         /* magic, reserved, count */
#define PARAMS_TENSOR_FIXED_BYTES 32u   /* magic .. lanes */
#define PARAMS_MAX_TENSOR_BYTES 0x7FFFFFFFull

static uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) {
    v = (v << 8) | p[i];
  }
  return v;
}

static uint32_t get_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

static int bad(const char* what) {
  TVMAPISetLastError(what);
  return MTVG_FAILED;
}

/* Is [pos, pos + n) inside the blob? */
static int has(const mtvg_params_reader_t* r, size_t pos, uint64_t n) {
  return pos <= r->size && n <= (uint64_t)(r->size - pos);
}

/* A reader that failed to open yields nothing: mtvg_params_next() then returns 0. */
static int open_failed(mtvg_params_reader_t* r, const char* what) {
  memset(r, 0, sizeof(*r));
  return bad(what);
}

int mtvg_params_open(mtvg_params_reader_t* r, const uint8_t* blob, size_t size) {
  memset(r, 0, sizeof(*r));
  r->blob = blob;
  r->size = blob == NULL ? 0 : size;
  if (!has(r, 0, PARAMS_HEADER_BYTES)) {
    return open_failed(r, "params: shorter than its 24-byte header");
  }
  if (get_u64(blob) != PARAMS_LIST_MAGIC) {
    return open_failed(r, "params: not a TVM params blob (wrong magic)");
  }
  uint64_t count = get_u64(blob + 16);
  if (count > r->size / 8u) {
    return open_failed(r, "params: claims more names than the blob can hold");
  }
  size_t pos = PARAMS_HEADER_BYTES;
  for (uint64_t i = 0; i < count; i++) {
    if (!has(r, pos, 8)) {
      return open_failed(r, "params: name table is truncated");
    }
    uint64_t len = get_u64(blob + pos);
    pos += 8;
    if (len > MTVG_GRAPH_MAX_NAME_BYTES || !has(r, pos, len)) {
      return open_failed(r, "params: a name is longer than MTVG_GRAPH_MAX_NAME_BYTES or "
                            "truncated");
    }
    pos += (size_t)len;
  }
  if (!has(r, pos, 8)) {
    return open_failed(r, "params: tensor count is missing");
  }
  if (get_u64(blob + pos) != count) {
    return open_failed(r, "params: number of names and of tensors differ");
  }
  r->count = count;
  r->name_pos = PARAMS_HEADER_BYTES;
  r->tensor_pos = pos + 8;
  return 0;
}

int mtvg_params_next(mtvg_params_reader_t* r, mtvg_param_t* out) {
  if (r->blob == NULL || r->done >= r->count) {
    return 0;
  }
  const uint8_t* b = r->blob;
  /* The name (checked by mtvg_params_open). */
  uint64_t name_len = get_u64(b + r->name_pos);
  out->name.ptr = (const char*)(b + r->name_pos + 8);
  out->name.len = (uint32_t)name_len;

  size_t pos = r->tensor_pos;
  if (!has(r, pos, PARAMS_TENSOR_FIXED_BYTES)) {
    return bad("params: tensor record is truncated");
  }
  if (get_u64(b + pos) != PARAMS_TENSOR_MAGIC) {
    return bad("params: tensor record has a wrong magic");
  }
  uint32_t ndim = get_u32(b + pos + 24);
  out->dtype.code = b[pos + 28];
  out->dtype.bits = b[pos + 29];
  out->dtype.lanes = (uint16_t)(b[pos + 30] | (b[pos + 31] << 8));
  pos += PARAMS_TENSOR_FIXED_BYTES;
  if (ndim > MTVG_GRAPH_MAX_NDIM) {
    return bad("params: tensor with more than MTVG_GRAPH_MAX_NDIM dimensions");
  }
  if (out->dtype.bits == 0 || out->dtype.lanes != 1) {
    return bad("params: tensor with 0 bits or vector lanes");
  }
  if (!has(r, pos, 8u * ndim + 8u)) {
    return bad("params: tensor shape is truncated");
  }
  uint64_t expect = (out->dtype.bits + 7u) / 8u;
  out->ndim = (int32_t)ndim;
  for (uint32_t d = 0; d < ndim; d++) {
    uint64_t dim = get_u64(b + pos);
    pos += 8;
    if (dim > PARAMS_MAX_TENSOR_BYTES || (dim != 0 && expect > PARAMS_MAX_TENSOR_BYTES / dim)) {
      return bad("params: tensor dimension negative or the tensor larger than 2 GiB");
    }
    out->shape[d] = (int64_t)dim;
    expect *= dim;
  }
  uint64_t nbytes = get_u64(b + pos);
  pos += 8;
  if (nbytes != expect) {
    return bad("params: tensor byte size does not match its shape and dtype");
  }
  if (!has(r, pos, nbytes)) {
    return bad("params: tensor data is truncated");
  }
  out->data = b + pos;
  out->size_bytes = nbytes;
  r->tensor_pos = pos + (size_t)nbytes;
  r->name_pos += 8u + (size_t)name_len;
  r->done++;
  return 1;
}

/* ---- Binding to a graph --------------------------------------------------------------- */

static int fail_param(const char* what, mtvg_slice_t name) {
  char text[MTVG_LAST_ERROR_BYTES];
  size_t n = 0;
  const char* parts[3] = {"params: '", NULL, what};
  for (int k = 0; k < 3; k++) {
    const char* s = k == 1 ? name.ptr : parts[k];
    size_t len = k == 1 ? name.len : strlen(s);
    if (len > sizeof(text) - 1 - n) {
      len = sizeof(text) - 1 - n;
    }
    memcpy(text + n, s, len);
    n += len;
  }
  text[n] = '\0';
  TVMAPISetLastError(text);
  return MTVG_FAILED;
}

static int find_arg_node(const mtvg_graph_t* g, mtvg_slice_t name, uint32_t* out) {
  for (uint32_t a = 0; a < g->num_arg_nodes; a++) {
    mtvg_slice_t n = g->nodes[g->arg_nodes[a]].name;
    if (n.len == name.len && (n.len == 0 || memcmp(n.ptr, name.ptr, n.len) == 0)) {
      *out = g->arg_nodes[a];
      return 1;
    }
  }
  return 0;
}

/* Natural alignment of one element, at most 8 bytes. */
static uintptr_t element_align(DLDataType t) {
  uintptr_t bytes = (t.bits + 7u) / 8u;
  return bytes >= 8u ? 8u : bytes >= 4u ? 4u : bytes >= 2u ? 2u : 1u;
}

int mtvg_graph_set_params(mtvg_graph_t* g, const uint8_t* blob, size_t len) {
  if (g->state != MTVG_GRAPH_STATE_PARSED) {
    return bad("params: bind them once, right after a successful parse");
  }
  mtvg_params_reader_t r;
  if (mtvg_params_open(&r, blob, len) != 0) {
    return MTVG_FAILED;
  }
  for (;;) {
    mtvg_param_t p;
    int got = mtvg_params_next(&r, &p);
    if (got < 0) {
      return MTVG_FAILED;
    }
    if (got == 0) {
      break;
    }
    uint32_t nid;
    if (!find_arg_node(g, p.name, &nid)) {
      return fail_param("' is not an input of the graph", p.name);
    }
    mtvg_graph_entry_t* e = &g->entries[g->row_ptr[nid]];
    mtvg_graph_storage_t* st = &g->storage[e->storage_id];
    if (st->param != NULL) {
      return fail_param("' is given twice (or shares storage with another parameter)",
                        p.name);
    }
    if (st->users != 1) {
      return fail_param("' shares its storage id with other tensors; not supported", p.name);
    }
    if (p.dtype.code != e->dtype.code || p.dtype.bits != e->dtype.bits) {
      return fail_param("' has a dtype other than the graph's", p.name);
    }
    if (p.ndim != e->ndim || memcmp(p.shape, e->shape, sizeof(int64_t) * (size_t)p.ndim) != 0) {
      return fail_param("' has a shape other than the graph's", p.name);
    }
    st->param = p.data;
    st->param_in_place = ((uintptr_t)p.data % element_align(p.dtype)) == 0;
  }
  /* The model's inputs: arg nodes left without a parameter, in arg_nodes order. */
  g->num_inputs = 0;
  for (uint32_t a = 0; a < g->num_arg_nodes; a++) {
    uint32_t nid = g->arg_nodes[a];
    if (g->storage[g->entries[g->row_ptr[nid]].storage_id].param == NULL) {
      g->inputs[g->num_inputs++] = nid;
    }
  }
  g->state = MTVG_GRAPH_STATE_PARAMS;
  return 0;
}
