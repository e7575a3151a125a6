/*
 * libFuzzer harness: the input is a graph JSON. It goes through the whole graph executor:
 * mtvg_graph_parse, then (when that succeeds) mtvg_graph_set_params with an empty params
 * blob (every arg node becomes a model input), mtvg_graph_link against a fake system
 * library, mtvg_graph_storage_bytes, mtvg_graph_plan into an exact-size arena, the inputs,
 * mtvg_graph_run and the outputs. See fuzz_common.h for what is checked.
 *
 * Build and run: scripts/fuzz.sh. Replay one file: ./fuzz_graph_json FILE...
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* An empty params dict: list magic, reserved, 0 names, 0 tensors (32 bytes). */
static const uint8_t empty_params[32] = {
    0xB7, 0x9C, 0x04, 0x05, 0x4F, 0x8D, 0xE5, 0xF7, 0, 0, 0, 0, 0, 0, 0, 0,
    0,    0,    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0};

static mtvg_graph_t graph;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > UINT32_MAX) {
    return 0;
  }
  /* Exact size and no NUL terminator: any read past the text is an ASan error. */
  char* json = (char*)malloc(size == 0 ? 1 : size);
  if (json == NULL) {
    return 0;
  }
  if (size > 0) {
    memcpy(json, data, size);
  }
  /* An empty input is passed as a pointer one past its 1-byte block. */
  const char* text = size == 0 ? json + 1 : json;
  TVMAPISetLastError("");
  if (mtvg_graph_parse(&graph, text, size) != 0) {
    FZ_CHECK(TVMGetLastError()[0] != '\0');
    free(json);
    return 0;
  }
  FZ_CHECK(graph.num_nodes >= 1 && graph.num_nodes <= MTVG_GRAPH_MAX_NODES);
  FZ_CHECK(graph.num_entries <= MTVG_GRAPH_MAX_ENTRIES);
  FZ_CHECK(graph.num_storage <= MTVG_GRAPH_MAX_STORAGE);
  FZ_CHECK(graph.num_heads <= MTVG_GRAPH_MAX_HEADS);
  FZ_CHECK(graph.num_input_refs <= MTVG_GRAPH_MAX_INPUT_REFS);
  for (uint32_t n = 0; n < graph.num_nodes; n++) {
    fz_check_slice(graph.nodes[n].name, text, size);
    fz_check_slice(graph.nodes[n].func_name, text, size);
  }

  TVMAPISetLastError("");
  if (mtvg_graph_set_params(&graph, empty_params, sizeof(empty_params)) != 0) {
    FZ_CHECK(TVMGetLastError()[0] != '\0');
    free(json);
    return 0;
  }
  for (uint32_t i = 0; i < mtvg_graph_num_inputs(&graph); i++) {
    fz_check_slice(mtvg_graph_input_name(&graph, i), text, size);
  }
  fz_link_plan_run(&graph, empty_params, sizeof(empty_params), (unsigned)(size * 7u));
  free(json);
  return 0;
}
