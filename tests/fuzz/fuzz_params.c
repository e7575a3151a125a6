/*
 * libFuzzer harness: the input is a params blob (tvm.runtime.save_param_dict format).
 * 1. mtvg_params_open + mtvg_params_next until the end or an error; every parameter
 *    returned must lie inside the blob.
 * 2. The blob is bound with mtvg_graph_set_params to fresh copies of two real graphs
 *    parsed once at start-up (hannah magic-wand, 18 nodes / params p0..p7; staticrt conv1d,
 *    params p0, p1), and when that succeeds the graph is linked, planned and run (see
 *    fuzz_common.h): parameters used in place must lie inside the blob.
 * The blob is copied into an exact-size heap block so ASan catches any overread.
 *
 * Build and run: scripts/fuzz.sh. Replay one file: ./fuzz_params FILE...
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "hannah_graph.inc"
#include "staticrt_graph.inc"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

#define NUM_GRAPHS 2

static mtvg_graph_t parsed[NUM_GRAPHS];
static mtvg_graph_t work;
static int ready;

static void setup(void) {
  const char* texts[NUM_GRAPHS] = {mtvg_fuzz_hannah_graph, mtvg_fuzz_staticrt_graph};
  size_t lens[NUM_GRAPHS] = {sizeof(mtvg_fuzz_hannah_graph) - 1,
                             sizeof(mtvg_fuzz_staticrt_graph) - 1};
  for (int i = 0; i < NUM_GRAPHS; i++) {
    FZ_CHECK(mtvg_graph_parse(&parsed[i], texts[i], lens[i]) == 0);
  }
  ready = 1;
}

static void walk_blob(const uint8_t* blob, size_t size) {
  mtvg_params_reader_t r;
  TVMAPISetLastError("");
  if (mtvg_params_open(&r, blob, size) != 0) {
    FZ_CHECK(TVMGetLastError()[0] != '\0');
    return;
  }
  mtvg_param_t p;
  /* Each record takes at least one byte of the blob, so this many steps must be enough. */
  for (size_t steps = 0;; steps++) {
    FZ_CHECK(steps <= size);
    int rc = mtvg_params_next(&r, &p);
    FZ_CHECK(rc >= -1 && rc <= 1);
    if (rc == -1) {
      FZ_CHECK(TVMGetLastError()[0] != '\0');
      return;
    }
    if (rc == 0) {
      FZ_CHECK(steps == r.count);
      return;
    }
    FZ_CHECK(p.ndim >= 0 && p.ndim <= MTVG_GRAPH_MAX_NDIM);
    fz_check_slice(p.name, (const char*)blob, size);
    FZ_CHECK(p.size_bytes <= size);
    FZ_CHECK(p.size_bytes == 0 || fz_inside(p.data, p.size_bytes, blob, blob + size));
    uint8_t acc = 0;
    for (uint64_t i = 0; i < p.size_bytes; i++) {
      acc ^= p.data[i];
    }
    fz_sink = acc;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!ready) {
    setup();
  }
  uint8_t* heap = (uint8_t*)malloc(size == 0 ? 1 : size);
  if (heap == NULL) {
    return 0;
  }
  if (size > 0) {
    memcpy(heap, data, size);
  }
  /* An empty input is passed as a pointer one past its 1-byte block. */
  const uint8_t* blob = size == 0 ? heap + 1 : heap;
  walk_blob(blob, size);
  for (int i = 0; i < NUM_GRAPHS; i++) {
    memcpy(&work, &parsed[i], sizeof(work));
    TVMAPISetLastError("");
    if (mtvg_graph_set_params(&work, blob, size) != 0) {
      FZ_CHECK(TVMGetLastError()[0] != '\0');
      continue;
    }
    FZ_CHECK(mtvg_graph_num_inputs(&work) <= work.num_arg_nodes);
    fz_link_plan_run(&work, blob, size, (unsigned)(size + 5u * (unsigned)i));
  }
  free(heap);
  return 0;
}
