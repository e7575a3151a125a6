/*
 * microtvm-gen runtime: the graph executor (mtvg/graph.h).
 *
 * The JSON parser is a bounded recursive-descent reader over the text as it sits in
 * flash. It reads the keys the executor needs and skips any other value (nesting at most
 * MTVG_GRAPH_MAX_JSON_DEPTH deep). Strings are kept as slices of the text; their escapes
 * are checked but not decoded, so names compare byte for byte as written.
 */
#include <string.h>

#include "mtvg/graph.h"
#include "mtvg/runtime.h"

/* Node attribute bits (mtvg_graph_node_t.attr_seen). */
#define ATTR_FUNC_NAME 0x1u
#define ATTR_NUM_INPUTS 0x2u
#define ATTR_NUM_OUTPUTS 0x4u
#define ATTR_FLATTEN_DATA 0x8u

/* Top-level keys (duplicate detection). */
#define KEY_NODES 0x1u
#define KEY_ARG_NODES 0x2u
#define KEY_HEADS 0x4u
#define KEY_ATTRS 0x8u
#define KEY_ROW_PTR 0x10u

/* Largest integer the graph may hold (ids, counts, dimensions). */
#define MAX_JSON_INT 0x7FFFFFFFll

/* Largest tensor, and largest total of all storage buffers, in bytes. */
#define MAX_TENSOR_BYTES 0x7FFFFFFFull

/* ---- Error messages ------------------------------------------------------------------- */

typedef struct {
  char text[MTVG_LAST_ERROR_BYTES];
  size_t len;
} message_t;

static void msg_add(message_t* m, const char* s, size_t n) {
  size_t room = sizeof(m->text) - 1 - m->len;
  if (n > room) {
    n = room;
  }
  memcpy(m->text + m->len, s, n);
  m->len += n;
  m->text[m->len] = '\0';
}

static void msg_str(message_t* m, const char* s) { msg_add(m, s, strlen(s)); }

static void msg_slice(message_t* m, mtvg_slice_t s) { msg_add(m, s.ptr, s.len); }

static void msg_uint(message_t* m, uint64_t v) {
  char digits[20];
  size_t n = 0;
  do {
    digits[sizeof(digits) - 1 - n] = (char)('0' + (v % 10u));
    v /= 10u;
    n++;
  } while (v != 0u && n < sizeof(digits));
  msg_add(m, digits + sizeof(digits) - n, n);
}

static void msg_init(message_t* m, const char* prefix) {
  m->len = 0;
  m->text[0] = '\0';
  msg_str(m, prefix);
}

static int msg_fail(message_t* m) {
  TVMAPISetLastError(m->text);
  return MTVG_FAILED;
}

static int fail(const char* what) {
  TVMAPISetLastError(what);
  return MTVG_FAILED;
}

/* "graph: node <id> '<name>': <what>" */
static int fail_node(const mtvg_graph_t* g, uint32_t nid, const char* what) {
  message_t m;
  msg_init(&m, "graph: node ");
  msg_uint(&m, nid);
  if (nid < g->num_nodes && g->nodes[nid].name.len > 0) {
    msg_str(&m, " '");
    msg_slice(&m, g->nodes[nid].name);
    msg_str(&m, "'");
  }
  msg_str(&m, ": ");
  msg_str(&m, what);
  return msg_fail(&m);
}

static int slice_eq(mtvg_slice_t s, const char* lit) {
  size_t n = strlen(lit);
  return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

/* ---- JSON reader ---------------------------------------------------------------------- */

typedef struct {
  const char* s;
  size_t n;
  size_t pos;
  const char* error; /* first error, if any */
  size_t error_pos;
} json_t;

static int json_fail(json_t* j, const char* what) {
  if (j->error == NULL) {
    j->error = what;
    j->error_pos = j->pos;
  }
  return MTVG_FAILED;
}

static void json_ws(json_t* j) {
  while (j->pos < j->n) {
    char c = j->s[j->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      return;
    }
    j->pos++;
  }
}

/* Skip whitespace; return the next character without taking it (0 at the end). */
static char json_peek(json_t* j) {
  json_ws(j);
  return j->pos < j->n ? j->s[j->pos] : '\0';
}

static int json_expect(json_t* j, char c) {
  if (json_peek(j) != c) {
    return json_fail(j, "unexpected character");
  }
  j->pos++;
  return 0;
}

static int is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int json_string(json_t* j, mtvg_slice_t* out) {
  if (json_expect(j, '"') != 0) {
    return json_fail(j, "expected a string");
  }
  size_t start = j->pos;
  while (j->pos < j->n) {
    unsigned char c = (unsigned char)j->s[j->pos];
    if (c == '"') {
      size_t len = j->pos - start;
      if (len > MTVG_GRAPH_MAX_NAME_BYTES) {
        return json_fail(j, "string longer than MTVG_GRAPH_MAX_NAME_BYTES");
      }
      out->ptr = j->s + start;
      out->len = (uint32_t)len;
      j->pos++;
      return 0;
    }
    if (c < 0x20) {
      return json_fail(j, "control character in a string");
    }
    if (c == '\\') {
      j->pos++;
      if (j->pos >= j->n) {
        break;
      }
      char e = j->s[j->pos];
      if (e == 'u') {
        for (int k = 1; k <= 4; k++) {
          if (j->pos + (size_t)k >= j->n || !is_hex(j->s[j->pos + (size_t)k])) {
            return json_fail(j, "bad \\u escape");
          }
        }
        j->pos += 4;
      } else if (strchr("\"\\/bfnrt", e) == NULL || e == '\0') {
        return json_fail(j, "bad escape in a string");
      }
    }
    j->pos++;
  }
  return json_fail(j, "unterminated string");
}

/* An integer in [-MAX_JSON_INT, MAX_JSON_INT]; fractions and exponents are refused. */
static int json_int(json_t* j, int64_t* out) {
  json_ws(j);
  int negative = 0;
  if (j->pos < j->n && j->s[j->pos] == '-') {
    negative = 1;
    j->pos++;
  }
  size_t start = j->pos;
  int64_t v = 0;
  while (j->pos < j->n && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
    v = v * 10 + (j->s[j->pos] - '0');
    if (v > MAX_JSON_INT) {
      return json_fail(j, "integer out of range");
    }
    j->pos++;
  }
  if (j->pos == start) {
    return json_fail(j, "expected an integer");
  }
  if (j->pos < j->n && (j->s[j->pos] == '.' || j->s[j->pos] == 'e' || j->s[j->pos] == 'E')) {
    return json_fail(j, "expected an integer, found a fraction");
  }
  *out = negative ? -v : v;
  return 0;
}

static int json_uint32(json_t* j, uint32_t* out) {
  int64_t v;
  if (json_int(j, &v) != 0) {
    return MTVG_FAILED;
  }
  if (v < 0) {
    return json_fail(j, "negative number where a count or id belongs");
  }
  *out = (uint32_t)v;
  return 0;
}

static int json_literal(json_t* j, const char* word) {
  size_t n = strlen(word);
  if (j->n - j->pos < n || memcmp(j->s + j->pos, word, n) != 0) {
    return json_fail(j, "unexpected character");
  }
  j->pos += n;
  return 0;
}

/* Any number: -?digits(.digits)?([eE][+-]?digits)? */
static int json_skip_number(json_t* j) {
  size_t start = j->pos;
  if (j->pos < j->n && j->s[j->pos] == '-') {
    j->pos++;
  }
  size_t digits = j->pos;
  while (j->pos < j->n && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
    j->pos++;
  }
  if (j->pos == digits) {
    j->pos = start;
    return json_fail(j, "unexpected character");
  }
  if (j->pos < j->n && j->s[j->pos] == '.') {
    j->pos++;
    digits = j->pos;
    while (j->pos < j->n && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
      j->pos++;
    }
    if (j->pos == digits) {
      return json_fail(j, "bad number");
    }
  }
  if (j->pos < j->n && (j->s[j->pos] == 'e' || j->s[j->pos] == 'E')) {
    j->pos++;
    if (j->pos < j->n && (j->s[j->pos] == '+' || j->s[j->pos] == '-')) {
      j->pos++;
    }
    digits = j->pos;
    while (j->pos < j->n && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
      j->pos++;
    }
    if (j->pos == digits) {
      return json_fail(j, "bad number");
    }
  }
  return 0;
}

/*
 * Arrays and objects. json_array() calls `item` once per element; json_object() calls
 * `member` once per key, with the cursor on the value, which `member` must consume. Both
 * accept empty containers and refuse trailing commas.
 */
typedef int (*json_item_fn)(json_t* j, void* ctx);
typedef int (*json_member_fn)(json_t* j, mtvg_slice_t key, void* ctx);

static int json_array(json_t* j, json_item_fn item, void* ctx) {
  if (json_expect(j, '[') != 0) {
    return json_fail(j, "expected a list");
  }
  if (json_peek(j) == ']') {
    j->pos++;
    return 0;
  }
  for (;;) {
    if (item(j, ctx) != 0) {
      return MTVG_FAILED;
    }
    char c = json_peek(j);
    if (c != ',' && c != ']') {
      return json_fail(j, "expected ',' or ']'");
    }
    j->pos++;
    if (c == ']') {
      return 0;
    }
  }
}

static int json_object(json_t* j, json_member_fn member, void* ctx) {
  if (json_expect(j, '{') != 0) {
    return json_fail(j, "expected an object");
  }
  if (json_peek(j) == '}') {
    j->pos++;
    return 0;
  }
  for (;;) {
    mtvg_slice_t key;
    if (json_string(j, &key) != 0 || json_expect(j, ':') != 0 || member(j, key, ctx) != 0) {
      return MTVG_FAILED;
    }
    char c = json_peek(j);
    if (c != ',' && c != '}') {
      return json_fail(j, "expected ',' or '}'");
    }
    j->pos++;
    if (c == '}') {
      return 0;
    }
  }
}

static int json_skip_value(json_t* j, int depth);

static int skip_item(json_t* j, void* depth) { return json_skip_value(j, *(int*)depth); }

static int skip_member(json_t* j, mtvg_slice_t key, void* depth) {
  (void)key;
  return json_skip_value(j, *(int*)depth);
}

/* Any value; containers may nest MTVG_GRAPH_MAX_JSON_DEPTH deep counting from depth 1. */
static int json_skip_value(json_t* j, int depth) {
  mtvg_slice_t unused;
  int inner = depth + 1;
  char c = json_peek(j);
  if ((c == '{' || c == '[') && depth > MTVG_GRAPH_MAX_JSON_DEPTH) {
    return json_fail(j, "nesting deeper than MTVG_GRAPH_MAX_JSON_DEPTH");
  }
  switch (c) {
    case '"':
      return json_string(j, &unused);
    case '{':
      return json_object(j, skip_member, &inner);
    case '[':
      return json_array(j, skip_item, &inner);
    case 't':
      return json_literal(j, "true");
    case 'f':
      return json_literal(j, "false");
    case 'n':
      return json_literal(j, "null");
    default:
      return json_skip_number(j);
  }
}

/* ---- Graph sections ------------------------------------------------------------------- */

/* [node, index] or [node, index, version] */
static int parse_ref(json_t* j, mtvg_graph_ref_t* ref) {
  uint32_t version;
  if (json_expect(j, '[') != 0 || json_uint32(j, &ref->node) != 0 ||
      json_expect(j, ',') != 0 || json_uint32(j, &ref->index) != 0) {
    return json_fail(j, "expected [node, index, version]");
  }
  if (json_peek(j) == ',') {
    j->pos++;
    if (json_uint32(j, &version) != 0) {
      return MTVG_FAILED;
    }
  }
  return json_expect(j, ']');
}

/* A decimal attribute value such as "3", as a small count. */
static int attr_count(json_t* j, mtvg_slice_t v, uint8_t* out) {
  uint32_t n = 0;
  if (v.len == 0 || v.len > 3) {
    return json_fail(j, "node attribute is not a small count");
  }
  for (uint32_t i = 0; i < v.len; i++) {
    if (v.ptr[i] < '0' || v.ptr[i] > '9') {
      return json_fail(j, "node attribute is not a small count");
    }
    n = n * 10u + (uint32_t)(v.ptr[i] - '0');
  }
  if (n > MTVG_GRAPH_MAX_OP_ARGS) {
    return json_fail(j, "operator with more than MTVG_GRAPH_MAX_OP_ARGS tensors");
  }
  *out = (uint8_t)n;
  return 0;
}

static int node_attr_member(json_t* j, mtvg_slice_t key, void* ctx) {
  mtvg_graph_node_t* node = (mtvg_graph_node_t*)ctx;
  int skip_depth = 1;
  uint8_t bit = slice_eq(key, "func_name")      ? ATTR_FUNC_NAME
                : slice_eq(key, "num_inputs")   ? ATTR_NUM_INPUTS
                : slice_eq(key, "num_outputs")  ? ATTR_NUM_OUTPUTS
                : slice_eq(key, "flatten_data") ? ATTR_FLATTEN_DATA
                                                : 0;
  if (bit == 0) {
    return skip_member(j, key, &skip_depth);
  }
  if (node->attr_seen & bit) {
    return json_fail(j, "node attribute given twice");
  }
  node->attr_seen |= bit;
  mtvg_slice_t value;
  if (json_string(j, &value) != 0) {
    return json_fail(j, "node attribute values must be strings");
  }
  switch (bit) {
    case ATTR_FUNC_NAME:
      node->func_name = value;
      return 0;
    case ATTR_NUM_INPUTS:
      return attr_count(j, value, &node->num_inputs);
    case ATTR_NUM_OUTPUTS:
      return attr_count(j, value, &node->num_outputs);
    default:
      return slice_eq(value, "0") ? 0
                                  : json_fail(j, "flatten_data other than \"0\" is not supported");
  }
}

/* The node being parsed, and what was seen of it. */
typedef struct {
  mtvg_graph_t* g;
  mtvg_graph_node_t* node;
  int seen_op;
  int seen_inputs;
} node_ctx_t;

static int input_ref_item(json_t* j, void* ctx) {
  node_ctx_t* n = (node_ctx_t*)ctx;
  if (n->g->num_input_refs >= MTVG_GRAPH_MAX_INPUT_REFS) {
    return json_fail(j, "more operator inputs than MTVG_GRAPH_MAX_INPUT_REFS");
  }
  if (parse_ref(j, &n->g->input_refs[n->g->num_input_refs]) != 0) {
    return MTVG_FAILED;
  }
  n->g->num_input_refs++;
  n->node->listed_inputs++;
  return 0;
}

static int node_member(json_t* j, mtvg_slice_t key, void* ctx) {
  node_ctx_t* n = (node_ctx_t*)ctx;
  int skip_depth = 1;
  if (slice_eq(key, "op")) {
    mtvg_slice_t op;
    if (json_string(j, &op) != 0) {
      return MTVG_FAILED;
    }
    if (slice_eq(op, "null")) {
      n->node->kind = MTVG_NODE_ARG;
    } else if (slice_eq(op, "tvm_op")) {
      n->node->kind = MTVG_NODE_OP;
    } else {
      return json_fail(j, "node op is not \"tvm_op\" or \"null\"; not supported");
    }
    n->seen_op = 1;
    return 0;
  }
  if (slice_eq(key, "name")) {
    return json_string(j, &n->node->name);
  }
  if (slice_eq(key, "inputs")) {
    if (n->seen_inputs) {
      return json_fail(j, "node inputs given twice");
    }
    n->seen_inputs = 1;
    return json_array(j, input_ref_item, n);
  }
  if (slice_eq(key, "attrs") || slice_eq(key, "attr")) {
    return json_object(j, node_attr_member, n->node);
  }
  return skip_member(j, key, &skip_depth);
}

static int node_item(json_t* j, void* ctx) {
  mtvg_graph_t* g = (mtvg_graph_t*)ctx;
  if (g->num_nodes >= MTVG_GRAPH_MAX_NODES) {
    return json_fail(j, "more nodes than MTVG_GRAPH_MAX_NODES");
  }
  mtvg_graph_node_t* node = &g->nodes[g->num_nodes];
  memset(node, 0, sizeof(*node));
  node->first_input = g->num_input_refs;
  node->num_outputs = 1;
  node_ctx_t n = {g, node, 0, 0};
  if (json_object(j, node_member, &n) != 0) {
    return MTVG_FAILED;
  }
  if (!n.seen_op) {
    return json_fail(j, "node without \"op\"");
  }
  if (node->kind == MTVG_NODE_OP) {
    if (!(node->attr_seen & ATTR_FUNC_NAME) || !(node->attr_seen & ATTR_NUM_INPUTS) ||
        !(node->attr_seen & ATTR_NUM_OUTPUTS)) {
      return json_fail(j, "operator node lacks func_name, num_inputs or num_outputs");
    }
    if (slice_eq(node->func_name, "__nop")) {
      node->kind = MTVG_NODE_NOP;
    }
  }
  g->num_nodes++;
  return 0;
}

/* A list of integers into `out` (capacity `cap`). */
typedef struct {
  uint32_t* out;
  uint32_t cap;
  uint32_t* count;
  const char* too_many;
} uint_list_t;

static int uint_item(json_t* j, void* ctx) {
  uint_list_t* l = (uint_list_t*)ctx;
  if (*l->count >= l->cap) {
    return json_fail(j, l->too_many);
  }
  if (json_uint32(j, &l->out[*l->count]) != 0) {
    return MTVG_FAILED;
  }
  (*l->count)++;
  return 0;
}

static int head_item(json_t* j, void* ctx) {
  mtvg_graph_t* g = (mtvg_graph_t*)ctx;
  if (g->num_heads >= MTVG_GRAPH_MAX_HEADS) {
    return json_fail(j, "more outputs than MTVG_GRAPH_MAX_HEADS");
  }
  if (parse_ref(j, &g->heads[g->num_heads]) != 0) {
    return MTVG_FAILED;
  }
  g->num_heads++;
  return 0;
}

/* "float32" -> {kDLFloat, 32, 1}; "bool" -> {kDLUInt, 1, 1}. */
static int parse_dtype(mtvg_slice_t s, DLDataType* out) {
  static const struct {
    const char* prefix;
    uint8_t code;
  } kinds[] = {{"bfloat", kDLBfloat}, {"float", kDLFloat}, {"uint", kDLUInt}, {"int", kDLInt}};
  if (slice_eq(s, "bool")) {
    out->code = kDLUInt;
    out->bits = 1;
    out->lanes = 1;
    return 0;
  }
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    size_t plen = strlen(kinds[k].prefix);
    if (s.len <= plen || s.len > plen + 2 || memcmp(s.ptr, kinds[k].prefix, plen) != 0) {
      continue;
    }
    uint32_t bits = 0;
    for (uint32_t i = (uint32_t)plen; i < s.len; i++) {
      if (s.ptr[i] < '0' || s.ptr[i] > '9') {
        return MTVG_FAILED;
      }
      bits = bits * 10u + (uint32_t)(s.ptr[i] - '0');
    }
    if (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
      return MTVG_FAILED;
    }
    out->code = kinds[k].code;
    out->bits = (uint8_t)bits;
    out->lanes = 1;
    return 0;
  }
  return MTVG_FAILED;
}

/* ["list_<kind>", [items...]] */
static int json_tagged_list(json_t* j, const char* tag, json_item_fn item, void* ctx) {
  mtvg_slice_t t;
  if (json_expect(j, '[') != 0 || json_string(j, &t) != 0 || json_expect(j, ',') != 0) {
    return json_fail(j, "graph attrs entries look like [\"list_int\", [...]]");
  }
  if (!slice_eq(t, tag)) {
    return json_fail(j, "graph attr has an unexpected type tag");
  }
  if (json_array(j, item, ctx) != 0) {
    return MTVG_FAILED;
  }
  return json_expect(j, ']');
}

static int dltype_item(json_t* j, void* ctx) {
  mtvg_graph_t* g = (mtvg_graph_t*)ctx;
  mtvg_slice_t s;
  if (g->num_dltype >= MTVG_GRAPH_MAX_ENTRIES) {
    return json_fail(j, "more entries than MTVG_GRAPH_MAX_ENTRIES");
  }
  if (json_string(j, &s) != 0) {
    return MTVG_FAILED;
  }
  if (parse_dtype(s, &g->entries[g->num_dltype].dtype) != 0) {
    return json_fail(j, "unsupported dtype (vector lanes or unknown type)");
  }
  g->num_dltype++;
  return 0;
}

static int storage_id_item(json_t* j, void* ctx) {
  mtvg_graph_t* g = (mtvg_graph_t*)ctx;
  int64_t sid;
  if (g->num_storage_ids >= MTVG_GRAPH_MAX_ENTRIES) {
    return json_fail(j, "more entries than MTVG_GRAPH_MAX_ENTRIES");
  }
  if (json_int(j, &sid) != 0) {
    return MTVG_FAILED;
  }
  if (sid < 0 || sid >= MTVG_GRAPH_MAX_STORAGE) {
    return json_fail(j, "storage id negative or not below MTVG_GRAPH_MAX_STORAGE");
  }
  g->entries[g->num_storage_ids].storage_id = (int32_t)sid;
  g->num_storage_ids++;
  return 0;
}

static int dim_item(json_t* j, void* ctx) {
  mtvg_graph_entry_t* e = (mtvg_graph_entry_t*)ctx;
  int64_t d;
  if (e->ndim >= MTVG_GRAPH_MAX_NDIM) {
    return json_fail(j, "shape with more than MTVG_GRAPH_MAX_NDIM dimensions");
  }
  if (json_int(j, &d) != 0) {
    return MTVG_FAILED;
  }
  if (d < 0) {
    return json_fail(j, "negative dimension (dynamic shapes are not supported)");
  }
  e->shape[e->ndim++] = d;
  return 0;
}

static int shape_item(json_t* j, void* ctx) {
  mtvg_graph_t* g = (mtvg_graph_t*)ctx;
  if (g->num_shapes >= MTVG_GRAPH_MAX_ENTRIES) {
    return json_fail(j, "more entries than MTVG_GRAPH_MAX_ENTRIES");
  }
  mtvg_graph_entry_t* e = &g->entries[g->num_shapes];
  e->ndim = 0;
  if (json_array(j, dim_item, e) != 0) {
    return MTVG_FAILED;
  }
  g->num_shapes++;
  return 0;
}

static int device_index_item(json_t* j, void* ctx) {
  (void)ctx;
  int64_t dev;
  if (json_int(j, &dev) != 0) {
    return MTVG_FAILED;
  }
  if (dev != kDLCPU) {
    return json_fail(j, "device_index other than the CPU (1): heterogeneous graphs are "
                        "not supported");
  }
  return 0;
}

static int graph_attr_member(json_t* j, mtvg_slice_t key, void* ctx) {
  mtvg_graph_t* g = (mtvg_graph_t*)ctx;
  int skip_depth = 1;
  if (slice_eq(key, "dltype")) {
    g->num_dltype = 0;
    return json_tagged_list(j, "list_str", dltype_item, g);
  }
  if (slice_eq(key, "storage_id")) {
    g->num_storage_ids = 0;
    return json_tagged_list(j, "list_int", storage_id_item, g);
  }
  if (slice_eq(key, "shape")) {
    g->num_shapes = 0;
    return json_tagged_list(j, "list_shape", shape_item, g);
  }
  if (slice_eq(key, "device_index")) {
    return json_tagged_list(j, "list_int", device_index_item, NULL);
  }
  if (slice_eq(key, "storage_scope")) {
    return json_fail(j, "storage_scope (memory scopes) is not supported");
  }
  return skip_member(j, key, &skip_depth);
}

/* The graph and the top-level keys seen so far. */
typedef struct {
  mtvg_graph_t* g;
  uint32_t seen;
} top_ctx_t;

static int top_member(json_t* j, mtvg_slice_t key, void* ctx) {
  top_ctx_t* t = (top_ctx_t*)ctx;
  mtvg_graph_t* g = t->g;
  int skip_depth = 1;
  uint32_t bit = slice_eq(key, "nodes")          ? KEY_NODES
                 : slice_eq(key, "arg_nodes")    ? KEY_ARG_NODES
                 : slice_eq(key, "heads")        ? KEY_HEADS
                 : slice_eq(key, "attrs")        ? KEY_ATTRS
                 : slice_eq(key, "node_row_ptr") ? KEY_ROW_PTR
                                                 : 0;
  if (bit != 0 && (t->seen & bit)) {
    return json_fail(j, "key given twice");
  }
  t->seen |= bit;
  uint_list_t args = {g->arg_nodes, MTVG_GRAPH_MAX_NODES, &g->num_arg_nodes,
                      "more arg nodes than MTVG_GRAPH_MAX_NODES"};
  uint_list_t rows = {g->row_ptr, MTVG_GRAPH_MAX_NODES + 1, &g->num_row_ptr,
                      "node_row_ptr longer than MTVG_GRAPH_MAX_NODES + 1"};
  switch (bit) {
    case KEY_NODES:
      return json_array(j, node_item, g);
    case KEY_ARG_NODES:
      return json_array(j, uint_item, &args);
    case KEY_HEADS:
      return json_array(j, head_item, g);
    case KEY_ATTRS:
      return json_object(j, graph_attr_member, g);
    case KEY_ROW_PTR:
      return json_array(j, uint_item, &rows);
    default:
      return skip_member(j, key, &skip_depth);
  }
}

static int parse_top(json_t* j, mtvg_graph_t* g) {
  top_ctx_t t = {g, 0};
  if (json_peek(j) != '{') {
    return json_fail(j, "the graph must be a JSON object");
  }
  if (json_object(j, top_member, &t) != 0) {
    return MTVG_FAILED;
  }
  if (t.seen != (KEY_NODES | KEY_ARG_NODES | KEY_HEADS | KEY_ATTRS | KEY_ROW_PTR)) {
    return json_fail(j, "the graph lacks nodes, arg_nodes, heads, attrs or node_row_ptr");
  }
  json_ws(j);
  if (j->pos != j->n) {
    return json_fail(j, "text after the graph object");
  }
  return 0;
}

/* ---- Checks after parsing ------------------------------------------------------------- */

static uint32_t entry_id(const mtvg_graph_t* g, mtvg_graph_ref_t ref) {
  return g->row_ptr[ref.node] + ref.index;
}

static int ref_valid(const mtvg_graph_t* g, mtvg_graph_ref_t ref) {
  return ref.node < g->num_nodes && ref.index < g->nodes[ref.node].num_outputs;
}

static int check_tables(mtvg_graph_t* g) {
  if (g->num_nodes == 0) {
    return fail("graph: no nodes");
  }
  if (g->num_row_ptr != g->num_nodes + 1 || g->row_ptr[0] != 0) {
    return fail("graph: node_row_ptr must have one more element than nodes, starting at 0");
  }
  for (uint32_t i = 0; i < g->num_nodes; i++) {
    if (g->row_ptr[i + 1] < g->row_ptr[i] ||
        g->row_ptr[i + 1] - g->row_ptr[i] != g->nodes[i].num_outputs) {
      return fail_node(g, i, "node_row_ptr does not match its number of outputs");
    }
  }
  g->num_entries = g->row_ptr[g->num_nodes];
  if (g->num_entries > MTVG_GRAPH_MAX_ENTRIES) {
    return fail("graph: more entries than MTVG_GRAPH_MAX_ENTRIES");
  }
  if (g->num_dltype != g->num_entries || g->num_storage_ids != g->num_entries ||
      g->num_shapes != g->num_entries) {
    return fail("graph: attrs dltype, storage_id and shape must each have one element per "
                "entry (node_row_ptr's last value)");
  }
  return 0;
}

static int check_nodes(mtvg_graph_t* g) {
  for (uint32_t i = 0; i < g->num_nodes; i++) {
    const mtvg_graph_node_t* n = &g->nodes[i];
    if (n->kind == MTVG_NODE_ARG) {
      if (n->listed_inputs != 0 || n->num_outputs != 1) {
        return fail_node(g, i, "an input node (op \"null\") has no inputs and one output");
      }
      continue;
    }
    if (n->func_name.len >= 2 && n->func_name.ptr[0] == '_' && n->func_name.ptr[1] == '_' &&
        n->kind != MTVG_NODE_NOP) {
      return fail_node(g, i, "special function (such as __copy) is not supported");
    }
    if (n->listed_inputs != n->num_inputs) {
      return fail_node(g, i, "num_inputs differs from the length of its inputs list");
    }
    if (n->num_outputs == 0 || (uint32_t)n->num_inputs + n->num_outputs > MTVG_GRAPH_MAX_OP_ARGS) {
      return fail_node(g, i, "needs 1 to MTVG_GRAPH_MAX_OP_ARGS tensors with an output");
    }
    for (uint32_t k = 0; k < n->num_inputs; k++) {
      mtvg_graph_ref_t ref = g->input_refs[n->first_input + k];
      if (ref.node >= i || !ref_valid(g, ref)) {
        return fail_node(g, i, "an input refers to a missing or later node");
      }
    }
    if (n->kind == MTVG_NODE_NOP) {
      if (n->num_inputs != 1 || n->num_outputs != 1) {
        return fail_node(g, i, "__nop must have one input and one output");
      }
      const mtvg_graph_entry_t* in = &g->entries[entry_id(g, g->input_refs[n->first_input])];
      const mtvg_graph_entry_t* out = &g->entries[g->row_ptr[i]];
      if (in->storage_id != out->storage_id || in->size_bytes != out->size_bytes) {
        return fail_node(g, i, "__nop (a reshape) whose output is not its input's storage "
                               "is not supported");
      }
    }
  }
  for (uint32_t a = 0; a < g->num_arg_nodes; a++) {
    if (g->arg_nodes[a] >= g->num_nodes || g->nodes[g->arg_nodes[a]].kind != MTVG_NODE_ARG) {
      return fail("graph: arg_nodes names a node that is not an input (op \"null\")");
    }
  }
  if (g->num_heads == 0) {
    return fail("graph: no outputs (heads)");
  }
  for (uint32_t h = 0; h < g->num_heads; h++) {
    if (!ref_valid(g, g->heads[h])) {
      return fail("graph: an output (heads) refers to a missing node");
    }
  }
  return 0;
}

static int check_entries(mtvg_graph_t* g) {
  g->num_storage = 0;
  for (uint32_t e = 0; e < g->num_entries; e++) {
    mtvg_graph_entry_t* en = &g->entries[e];
    uint64_t bytes = (en->dtype.bits + 7u) / 8u;
    for (int32_t d = 0; d < en->ndim; d++) {
      if (en->shape[d] != 0 && bytes > MAX_TENSOR_BYTES / (uint64_t)en->shape[d]) {
        return fail("graph: a tensor larger than 2 GiB");
      }
      bytes *= (uint64_t)en->shape[d];
    }
    en->size_bytes = (uint32_t)bytes;
    uint32_t sid = (uint32_t)en->storage_id;
    if (sid + 1u > g->num_storage) {
      for (uint32_t s = g->num_storage; s <= sid; s++) {
        memset(&g->storage[s], 0, sizeof(g->storage[s]));
      }
      g->num_storage = sid + 1u;
    }
    if (g->storage[sid].size_bytes < en->size_bytes) {
      g->storage[sid].size_bytes = en->size_bytes;
    }
    g->storage[sid].users++;
  }
  /* Every sum of storage sizes later (mtvg_graph_storage_bytes, plan offsets) is at most
   * this one, so bounding it keeps 32-bit size_t arithmetic from wrapping. */
  uint64_t total = 0;
  for (uint32_t s = 0; s < g->num_storage; s++) {
    total += ((uint64_t)g->storage[s].size_bytes + (MTVG_GRAPH_STORAGE_ALIGN - 1)) &
             ~(uint64_t)(MTVG_GRAPH_STORAGE_ALIGN - 1);
    if (total > MAX_TENSOR_BYTES) {
      return fail("graph: storage larger than 2 GiB in total");
    }
  }
  return 0;
}

int mtvg_graph_parse(mtvg_graph_t* g, const char* json, size_t len) {
  memset(g, 0, sizeof(*g));
  if (json == NULL) {
    return fail("graph: no JSON");
  }
  json_t j = {json, len, 0, NULL, 0};
  if (parse_top(&j, g) != 0) {
    message_t m;
    msg_init(&m, "graph JSON: ");
    msg_str(&m, j.error != NULL ? j.error : "malformed");
    msg_str(&m, " (at byte ");
    msg_uint(&m, j.error_pos);
    msg_str(&m, ")");
    g->num_nodes = 0;
    return msg_fail(&m);
  }
  if (check_tables(g) != 0 || check_entries(g) != 0 || check_nodes(g) != 0) {
    g->num_nodes = 0;
    return MTVG_FAILED;
  }
  /* Until parameters are bound, every arg node is a model input. */
  g->num_inputs = g->num_arg_nodes;
  memcpy(g->inputs, g->arg_nodes, g->num_arg_nodes * sizeof(g->arg_nodes[0]));
  g->state = MTVG_GRAPH_STATE_PARSED;
  return 0;
}

/* ---- Functions ------------------------------------------------------------------------ */

static TVMBackendPackedCFunc registry_find(const TVMFuncRegistry* reg, mtvg_slice_t name) {
  const char* p = reg->names;
  uint32_t count = (uint32_t)(uint8_t)p[0] | ((uint32_t)(uint8_t)p[1] << 8);
  if (count > MTVG_REGISTRY_MAX_FUNCS) {
    return NULL;
  }
  p += 2;
  for (uint32_t i = 0; i < count; i++) {
    size_t n = 0;
    while (n <= MTVG_GRAPH_MAX_NAME_BYTES && p[n] != '\0') {
      n++;
    }
    if (n > MTVG_GRAPH_MAX_NAME_BYTES) {
      return NULL;
    }
    if (n == name.len && memcmp(p, name.ptr, n) == 0) {
      return reg->funcs[i];
    }
    p += n + 1;
  }
  return NULL;
}

int mtvg_graph_link(mtvg_graph_t* g, const TVMModule* lib) {
  if (g->state < MTVG_GRAPH_STATE_PARSED) {
    return fail("graph: link before a successful parse");
  }
  if (lib == NULL || lib->registry == NULL || lib->registry->names == NULL ||
      lib->registry->funcs == NULL) {
    return fail("graph: no system library to take operators from");
  }
  for (uint32_t i = 0; i < g->num_nodes; i++) {
    mtvg_graph_node_t* n = &g->nodes[i];
    if (n->kind != MTVG_NODE_OP) {
      continue;
    }
    n->func = registry_find(lib->registry, n->func_name);
    if (n->func == NULL) {
      message_t m;
      msg_init(&m, "graph: function '");
      msg_slice(&m, n->func_name);
      msg_str(&m, "' is not in the system library");
      return msg_fail(&m);
    }
  }
  return 0;
}

/* ---- Memory --------------------------------------------------------------------------- */

static size_t align_up(size_t v) {
  return (v + (MTVG_GRAPH_STORAGE_ALIGN - 1)) & ~(size_t)(MTVG_GRAPH_STORAGE_ALIGN - 1);
}

size_t mtvg_graph_storage_bytes(const mtvg_graph_t* g) {
  size_t total = 0;
  for (uint32_t s = 0; s < g->num_storage; s++) {
    if (g->storage[s].users == 0 || g->storage[s].param_in_place) {
      continue;
    }
    total = align_up(total) + g->storage[s].size_bytes;
  }
  return align_up(total);
}

int mtvg_graph_plan(mtvg_graph_t* g, uint8_t* arena, size_t size) {
  if (g->state < MTVG_GRAPH_STATE_PARSED) {
    return fail("graph: plan before a successful parse");
  }
  uintptr_t addr = (uintptr_t)arena;
  size_t pad = (MTVG_GRAPH_STORAGE_ALIGN - (addr % MTVG_GRAPH_STORAGE_ALIGN)) %
               MTVG_GRAPH_STORAGE_ALIGN;
  size_t need = mtvg_graph_storage_bytes(g);
  if (need > 0 && (arena == NULL || size < pad || size - pad < need)) {
    message_t m;
    msg_init(&m, "graph: storage needs ");
    msg_uint(&m, need);
    msg_str(&m, " bytes, the arena has ");
    msg_uint(&m, arena == NULL || size < pad ? 0 : size - pad);
    return msg_fail(&m);
  }
  /* With nothing to place (only empty tensors), every buffer is this static block: operators
   * insist on non-NULL data. */
  static uint8_t empty_storage[MTVG_GRAPH_STORAGE_ALIGN];
  uint8_t* base = need > 0 ? arena + pad : empty_storage;
  size_t offset = 0;
  for (uint32_t s = 0; s < g->num_storage; s++) {
    mtvg_graph_storage_t* st = &g->storage[s];
    if (st->users == 0) {
      st->data = NULL;
      continue;
    }
    if (st->param_in_place) {
      st->data = (uint8_t*)(uintptr_t)st->param; /* read-only: only operators' inputs */
      continue;
    }
    offset = align_up(offset);
    st->data = base + offset;
    if (st->param != NULL) {
      memcpy(st->data, st->param, st->size_bytes);
    }
    offset += st->size_bytes;
  }
  g->storage_used = align_up(offset);
  for (uint32_t e = 0; e < g->num_entries; e++) {
    mtvg_graph_entry_t* en = &g->entries[e];
    DLTensor* t = &en->tensor;
    t->data = g->storage[en->storage_id].data;
    t->device.device_type = kDLCPU;
    t->device.device_id = 0;
    t->ndim = en->ndim;
    t->dtype = en->dtype;
    t->shape = en->shape;
    t->strides = NULL;
    t->byte_offset = 0;
  }
  g->state = MTVG_GRAPH_STATE_PLANNED;
  return 0;
}

/* ---- Inputs, outputs, running --------------------------------------------------------- */

uint32_t mtvg_graph_num_inputs(const mtvg_graph_t* g) {
  return g->state >= MTVG_GRAPH_STATE_PARSED ? g->num_inputs : 0;
}

mtvg_slice_t mtvg_graph_input_name(const mtvg_graph_t* g, uint32_t i) {
  mtvg_slice_t none = {"", 0};
  if (i >= mtvg_graph_num_inputs(g)) {
    return none;
  }
  return g->nodes[g->inputs[i]].name;
}

DLTensor* mtvg_graph_input(mtvg_graph_t* g, uint32_t i) {
  if (g->state < MTVG_GRAPH_STATE_PLANNED || i >= g->num_inputs) {
    return NULL;
  }
  return &g->entries[g->row_ptr[g->inputs[i]]].tensor;
}

uint32_t mtvg_graph_num_outputs(const mtvg_graph_t* g) {
  return g->state >= MTVG_GRAPH_STATE_PARSED ? g->num_heads : 0;
}

DLTensor* mtvg_graph_output(mtvg_graph_t* g, uint32_t i) {
  if (g->state < MTVG_GRAPH_STATE_PLANNED || i >= g->num_heads) {
    return NULL;
  }
  return &g->entries[entry_id(g, g->heads[i])].tensor;
}

uint64_t mtvg_tensor_bytes(const DLTensor* t) {
  uint64_t n = (t->dtype.bits + 7u) / 8u;
  for (int32_t d = 0; d < t->ndim; d++) {
    n *= (uint64_t)t->shape[d];
  }
  return n;
}

int mtvg_graph_run(mtvg_graph_t* g) {
  if (g->state < MTVG_GRAPH_STATE_PLANNED) {
    return fail("graph: run before mtvg_graph_plan()");
  }
  for (uint32_t i = 0; i < g->num_nodes; i++) {
    const mtvg_graph_node_t* n = &g->nodes[i];
    if (n->kind != MTVG_NODE_OP) {
      continue;
    }
    if (n->func == NULL) {
      return fail_node(g, i, "run before mtvg_graph_link()");
    }
    TVMValue args[MTVG_GRAPH_MAX_OP_ARGS];
    int codes[MTVG_GRAPH_MAX_OP_ARGS];
    int num_args = 0;
    for (uint32_t k = 0; k < n->num_inputs; k++) {
      args[num_args].v_handle = &g->entries[entry_id(g, g->input_refs[n->first_input + k])].tensor;
      codes[num_args++] = kTVMDLTensorHandle;
    }
    for (uint32_t k = 0; k < n->num_outputs; k++) {
      args[num_args].v_handle = &g->entries[g->row_ptr[i] + k].tensor;
      codes[num_args++] = kTVMDLTensorHandle;
    }
    TVMValue ret;
    int ret_code = kTVMNullptr;
    int rc = n->func(args, codes, num_args, &ret, &ret_code, NULL);
    if (rc != 0) {
      message_t m;
      msg_init(&m, "graph: ");
      msg_slice(&m, n->func_name);
      msg_str(&m, " failed: ");
      msg_str(&m, TVMGetLastError());
      TVMAPISetLastError(NULL); /* the operator's reason is in ours: ours replaces it */
      return msg_fail(&m);
    }
  }
  return 0;
}
