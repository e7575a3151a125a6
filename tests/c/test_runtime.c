/*
 * Unit tests of the C runtime (workspace arena, last error, framing), built for the host
 * with -Wall -Wextra -Werror and ASan/UBSan by tests/test_runtime_c.py.
 * The link is two memory buffers, so every byte on the wire can be checked.
 */
#include <stdio.h>
#include <string.h>

#include "mtvg/platform.h"
#include "mtvg/runtime.h"
#include "check.h"
#include "tvm/runtime/c_backend_api.h"

#define WIRE_BYTES 8192

static uint8_t wire_out[WIRE_BYTES];
static size_t wire_out_len;
static uint8_t wire_in[WIRE_BYTES];
static size_t wire_in_len;
static size_t wire_in_pos;

void mtvg_platform_init(void) {}
int mtvg_link_read(uint8_t* buf, size_t n) {
  if (wire_in_len - wire_in_pos < n) {
    return -1;
  }
  memcpy(buf, wire_in + wire_in_pos, n);
  wire_in_pos += n;
  return 0;
}
int mtvg_link_write(const uint8_t* buf, size_t n) {
  if (WIRE_BYTES - wire_out_len < n) {
    return -1;
  }
  memcpy(wire_out + wire_out_len, buf, n);
  wire_out_len += n;
  return 0;
}
void mtvg_link_flush(void) {}
uint64_t mtvg_timer_ticks(void) { return 0; }
uint64_t mtvg_timer_hz(void) { return 1; }
void mtvg_platform_exit(int status) { (void)status; __builtin_trap(); }

static void feed(const uint8_t* data, size_t n) {
  memcpy(wire_in + wire_in_len, data, n);
  wire_in_len += n;
}

static void test_workspace(void) {
  static uint8_t arena[256 + 1];
  mtvg_workspace_init(arena + 1, 256); /* misaligned on purpose */
  uint8_t* a = TVMBackendAllocWorkspace(1, 0, 10, 0, 8);
  uint8_t* b = TVMBackendAllocWorkspace(1, 0, 33, 2, 32);
  CHECK(a != NULL && b != NULL);
  CHECK(((uintptr_t)a % MTVG_WORKSPACE_ALIGN) == 0 && ((uintptr_t)b % MTVG_WORKSPACE_ALIGN) == 0);
  CHECK(b - a == 16);
  memset(a, 0xAA, 10);
  memset(b, 0xBB, 33);
  CHECK(mtvg_workspace_used() == 16 + 48);
  CHECK(TVMBackendFreeWorkspace(1, 0, a) == -1); /* not LIFO */
  CHECK(strstr(TVMGetLastError(), "LIFO") != NULL);
  CHECK(TVMBackendFreeWorkspace(1, 0, b) == 0);
  CHECK(TVMBackendFreeWorkspace(1, 0, a) == 0);
  CHECK(TVMBackendFreeWorkspace(1, 0, a) == -1); /* double free */
  CHECK(mtvg_workspace_used() == 0 && mtvg_workspace_peak() == 64);
  CHECK(TVMBackendAllocWorkspace(1, 0, 241, 0, 8) == NULL); /* 241 rounds to 256 > 240 */
  CHECK(TVMBackendAllocWorkspace(2, 0, 16, 0, 8) == NULL);  /* not the CPU */
  CHECK(TVMBackendAllocWorkspace(1, 0, (uint64_t)1 << 40, 0, 8) == NULL);
  CHECK(mtvg_workspace_failures() == 3);
  CHECK(TVMBackendAllocWorkspace(1, 0, 240, 0, 8) != NULL); /* exactly fits */
  mtvg_workspace_init(arena, 256);
  int got = 0;
  while (TVMBackendAllocWorkspace(1, 0, 0, 0, 8) != NULL && got < MTVG_WORKSPACE_MAX_LIVE + 5) {
    got++;
  }
  CHECK(got == MTVG_WORKSPACE_MAX_LIVE); /* the live-block stack is bounded */
  mtvg_workspace_init(NULL, 0);
  CHECK(TVMBackendAllocWorkspace(1, 0, 1, 0, 8) == NULL);
}

static void test_last_error(void) {
  char long_msg[MTVG_LAST_ERROR_BYTES * 2];
  memset(long_msg, 'x', sizeof(long_msg) - 1);
  long_msg[sizeof(long_msg) - 1] = '\0';
  TVMAPISetLastError(NULL);
  TVMAPISetLastError(long_msg);
  CHECK(strlen(TVMGetLastError()) == MTVG_LAST_ERROR_BYTES - 1);
  TVMAPISetLastError(NULL);
  CHECK(TVMGetLastError()[0] == '\0');
}

/* The first error since the last clear is the one kept: later errors of the same call, and
 * reading it, leave it alone; NULL or "" clears it. */
static void test_first_error_wins(void) {
  static uint8_t arena[64];
  mtvg_workspace_init(arena, sizeof(arena));
  TVMAPISetLastError("");
  CHECK(TVMBackendAllocWorkspace(2, 0, 16, 0, 8) == NULL);   /* not the CPU: first */
  CHECK(TVMBackendAllocWorkspace(1, 0, 4096, 0, 8) == NULL); /* arena exhausted: second */
  CHECK(TVMBackendFreeWorkspace(1, 0, arena) == MTVG_FAILED); /* not LIFO: third */
  CHECK(strcmp(TVMGetLastError(), "workspace: only the CPU device (1, 0) exists") == 0);
  TVMAPISetLastError("an outer layer's message");
  CHECK(strcmp(TVMGetLastError(), "workspace: only the CPU device (1, 0) exists") == 0);
  TVMAPISetLastError("");
  CHECK(TVMGetLastError()[0] == '\0');
  CHECK(TVMBackendAllocWorkspace(1, 0, 4096, 0, 8) == NULL);
  CHECK(strcmp(TVMGetLastError(), "workspace: arena exhausted") == 0);
  TVMAPISetLastError(NULL);
  CHECK(TVMBackendFreeWorkspace(1, 0, arena) == MTVG_FAILED);
  CHECK(strcmp(TVMGetLastError(), "workspace: free out of LIFO order") == 0);
  TVMAPISetLastError(NULL);
}

static void test_frame_send_vector(void) {
  /* microtvm-v018-facts.md §4.4: Normal, body FF 01, session 0x335A. */
  const uint8_t payload[] = {0x5A, 0x33, 0x10, 0xFF, 0x01};
  const uint8_t expect[] = {0xFF, 0xFD, 0x05, 0x00, 0x00, 0x00, 0x5A, 0x33,
                            0x10, 0xFF, 0xFF, 0x01, 0x73, 0xB1};
  wire_out_len = 0;
  CHECK(mtvg_frame_send(payload, sizeof(payload)) == 0);
  CHECK(wire_out_len == sizeof(expect) && memcmp(wire_out, expect, sizeof(expect)) == 0);
  const uint8_t check[] = "123456789";
  CHECK(mtvg_crc16_update(0xFFFFu, check, 9) == 0x29B1u);
  static uint8_t big[MTVG_LINK_MAX_PAYLOAD + 1];
  CHECK(mtvg_frame_send(big, sizeof(big)) == -1);
}

static void test_frame_receive(void) {
  static uint8_t buf[MTVG_LINK_MAX_PAYLOAD];
  static uint8_t payload[600];
  for (size_t i = 0; i < sizeof(payload); i++) {
    payload[i] = (uint8_t)(i * 7u);
  }
  wire_in_len = wire_in_pos = 0;
  const uint8_t junk[] = {0x00, 0xFE, 0xFF, 0x12, 0xFF};
  feed(junk, sizeof(junk));
  /* A corrupted frame, then an oversize claim, then a bad escape, then a good frame. */
  wire_out_len = 0;
  CHECK(mtvg_frame_send(payload, 100) == 0);
  wire_out[20] ^= 0x04;
  feed(wire_out, wire_out_len);
  const uint8_t oversize[] = {0xFF, 0xFD, 0x00, 0x00, 0x01, 0x00, 0x00};
  feed(oversize, sizeof(oversize));
  const uint8_t bad_escape[] = {0xFF, 0xFD, 0x02, 0xFF, 0x42};
  feed(bad_escape, sizeof(bad_escape));
  wire_out_len = 0;
  CHECK(mtvg_frame_send(payload, sizeof(payload)) == 0);
  feed(wire_out, wire_out_len);
  uint32_t errors_before = mtvg_frame_errors();
  int32_t n = mtvg_frame_receive(buf);
  CHECK(n == (int32_t)sizeof(payload) && memcmp(buf, payload, sizeof(payload)) == 0);
  /* Damaged: the corrupted frame, the oversize claim, the bad escape; and two runs of junk
   * between frames (the leading bytes, and the two bytes after the oversize length). */
  CHECK(mtvg_frame_errors() - errors_before == 5);
  /* A frame cut short by FF FD restarts; then the link closes. */
  wire_out_len = 0;
  CHECK(mtvg_frame_send(payload, 10) == 0);
  feed(wire_out, 8);
  feed(wire_out, wire_out_len);
  CHECK(mtvg_frame_receive(buf) == 10 && memcmp(buf, payload, 10) == 0);
  CHECK(mtvg_frame_receive(buf) == -1);
}

int main(void) {
  test_workspace();
  test_last_error();
  test_first_error_wins();
  test_frame_send_vector();
  test_frame_receive();
  return CHECK_REPORT();
}
