/*
 * microtvm-gen runtime: TVMBackendAllocWorkspace / TVMBackendFreeWorkspace on one static
 * arena, strictly LIFO, plus the error slot (the first error since the last clear).
 */
#include <string.h>

#include "mtvg/runtime.h"
#include "tvm/runtime/c_backend_api.h"

static uint8_t* arena_base;
static size_t arena_size;
static size_t arena_top;                            /* bytes in use */
static size_t arena_peak;                           /* most bytes ever in use */
static size_t live_offsets[MTVG_WORKSPACE_MAX_LIVE]; /* arena_top before each live block */
static uint8_t* live_blocks[MTVG_WORKSPACE_MAX_LIVE];
static uint32_t live_count;
static uint32_t failures;
static char last_error[MTVG_LAST_ERROR_BYTES];

void mtvg_workspace_init(uint8_t* base, size_t size) {
  uintptr_t addr = (uintptr_t)base;
  size_t pad = (MTVG_WORKSPACE_ALIGN - (addr % MTVG_WORKSPACE_ALIGN)) % MTVG_WORKSPACE_ALIGN;
  if (base == NULL || size < pad) {
    arena_base = NULL;
    arena_size = 0;
  } else {
    arena_base = base + pad;
    arena_size = size - pad;
  }
  arena_top = 0;
  arena_peak = 0;
  live_count = 0;
  failures = 0;
}

size_t mtvg_workspace_used(void) { return arena_top; }

size_t mtvg_workspace_peak(void) { return arena_peak; }

uint32_t mtvg_workspace_failures(void) { return failures; }

void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes,
                               int dtype_code_hint, int dtype_bits_hint) {
  (void)dtype_code_hint;
  (void)dtype_bits_hint;
  if (device_type != kDLCPU || device_id != 0) {
    TVMAPISetLastError("workspace: only the CPU device (1, 0) exists");
    failures++;
    return NULL;
  }
  size_t rounded = (size_t)nbytes;
  if ((uint64_t)rounded != nbytes || rounded > arena_size) {
    TVMAPISetLastError("workspace: arena exhausted");
    failures++;
    return NULL;
  }
  rounded = (rounded + (MTVG_WORKSPACE_ALIGN - 1)) & ~(size_t)(MTVG_WORKSPACE_ALIGN - 1);
  if (live_count >= MTVG_WORKSPACE_MAX_LIVE) {
    TVMAPISetLastError("workspace: more than MTVG_WORKSPACE_MAX_LIVE live blocks");
    failures++;
    return NULL;
  }
  if (rounded > arena_size - arena_top) {
    TVMAPISetLastError("workspace: arena exhausted");
    failures++;
    return NULL;
  }
  uint8_t* block = arena_base + arena_top;
  live_offsets[live_count] = arena_top;
  live_blocks[live_count] = block;
  live_count++;
  arena_top += rounded;
  if (arena_top > arena_peak) {
    arena_peak = arena_top;
  }
  return block;
}

int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr) {
  (void)device_type;
  (void)device_id;
  if (live_count == 0 || live_blocks[live_count - 1] != (uint8_t*)ptr) {
    TVMAPISetLastError("workspace: free out of LIFO order");
    return MTVG_FAILED;
  }
  live_count--;
  arena_top = live_offsets[live_count];
  return 0;
}

void TVMAPISetLastError(const char* msg) {
  if (msg == NULL || msg[0] == '\0') {
    last_error[0] = '\0'; /* cleared: the next error is recorded */
    return;
  }
  if (last_error[0] != '\0') {
    return; /* the first error since the last clear is the one reported */
  }
  size_t n = strlen(msg);
  if (n >= sizeof(last_error)) {
    n = sizeof(last_error) - 1;
  }
  memcpy(last_error, msg, n);
  last_error[n] = '\0';
}

const char* TVMGetLastError(void) { return last_error; }
