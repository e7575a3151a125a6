/*
 * microtvm-gen standalone application: runs the model on request of the host.
 *
 * The host and the device exchange frames (mtvg_frame_send/receive). Each payload starts
 * with a command byte; integers are little-endian. docs/link.md has the full table.
 *   host -> device  'h' nonce             -> 'H' nonce abi counts sizes arena storage
 *                   (the host starts every session, at any time: after reset, or when it
 *                   opens the port long after, or reconnects)
 *   device -> host  'E' message, then exit MTVG_EXIT_SETUP_FAILED (if set-up failed)
 *   host -> device  'I' idx offset data  -> 'A' status  (write part of an input)
 *   host -> device  'R'                  -> 'D' status ticks hz peak errors message
 *   host -> device  'O' idx offset len   -> 'o' data    (read part of an output)
 *   host -> device  'K'                  -> 'k' text  (accelerator counters after a run)
 *   host -> device  'P' first(u32)       -> 'p' marked(u32) first(u32) ticks(u64)...
 *                   (the timer at the run function's marks of the last run, from point
 *                   `first` on, as many as the frame holds; built with `generate --profile`)
 *   host -> device  'Q' status           -> (exit with that status)
 *   device -> host  'E' message          (a request the device could not honour)
 */
#include <string.h>

#include "mtvg/accel.h"
#include "mtvg/model.h"
#include "mtvg/platform.h"
#include "mtvg/runtime.h"
#include "mtvg/status.h"
#include "tvm/runtime/c_runtime_api.h"

#define CMD_HELLO_REQUEST 'h'
#define CMD_HELLO 'H'
#define CMD_INPUT 'I'
#define CMD_ACK 'A'
#define CMD_RUN 'R'
#define CMD_DONE 'D'
#define CMD_OUTPUT 'O'
#define CMD_OUTPUT_DATA 'o'
#define CMD_QUIT 'Q'
#define CMD_COUNTERS 'K'
#define CMD_COUNTERS_TEXT 'k'
#define CMD_ERROR 'E'
#define CMD_PROFILE 'P'
#define CMD_PROFILE_DATA 'p'

static uint8_t rx[MTVG_LINK_MAX_PAYLOAD];
static uint8_t tx[MTVG_LINK_MAX_PAYLOAD];

static void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

static void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

static uint32_t get_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

static void send_error(const char* msg) {
  size_t n = strlen(msg);
  if (n > sizeof(tx) - 1) {
    n = sizeof(tx) - 1;
  }
  tx[0] = CMD_ERROR;
  memcpy(tx + 1, msg, n);
  (void)mtvg_frame_send(tx, n + 1);
}

/* 'h' nonce(u32): the hello, with the host's nonce first (the host drops stale hellos). */
static void send_hello(int32_t len) {
  if (len != 5) {
    send_error("bad hello request");
    return;
  }
  size_t n = 0;
  tx[n++] = CMD_HELLO;
  memcpy(tx + n, rx + 1, 4);
  n += 4;
  put_u32(tx + n, MTVG_RUNTIME_ABI_VERSION);
  n += 4;
  put_u32(tx + n, mtvg_model_num_inputs);
  n += 4;
  put_u32(tx + n, mtvg_model_num_outputs);
  n += 4;
  for (uint32_t i = 0; i < mtvg_model_num_inputs && n + 4 <= sizeof(tx); i++, n += 4) {
    put_u32(tx + n, mtvg_model_inputs[i].size_bytes);
  }
  for (uint32_t i = 0; i < mtvg_model_num_outputs && n + 4 <= sizeof(tx); i++, n += 4) {
    put_u32(tx + n, mtvg_model_outputs[i].size_bytes);
  }
  const uint32_t tail[3] = {mtvg_model_arena_bytes, mtvg_model_storage_bytes,
                            mtvg_model_storage_used()};
  for (size_t k = 0; k < sizeof(tail) / sizeof(tail[0]) && n + 4 <= sizeof(tx); k++, n += 4) {
    put_u32(tx + n, tail[k]);
  }
  (void)mtvg_frame_send(tx, n);
}

/* 'I' idx(u8) offset(u32) data... */
static void handle_input(int32_t len) {
  if (len < 6 || rx[1] >= mtvg_model_num_inputs) {
    send_error("bad input request");
    return;
  }
  mtvg_tensor_t* t = &mtvg_model_inputs[rx[1]];
  uint32_t offset = get_u32(rx + 2);
  uint32_t count = (uint32_t)len - 6;
  if (offset > t->size_bytes || count > t->size_bytes - offset) {
    send_error("input data beyond the tensor");
    return;
  }
  memcpy(t->data + offset, rx + 6, count);
  tx[0] = CMD_ACK;
  tx[1] = 0;
  (void)mtvg_frame_send(tx, 2);
}

/* 'O' idx(u8) offset(u32) len(u32) */
static void handle_output(int32_t len) {
  if (len != 10 || rx[1] >= mtvg_model_num_outputs) {
    send_error("bad output request");
    return;
  }
  const mtvg_tensor_t* t = &mtvg_model_outputs[rx[1]];
  uint32_t offset = get_u32(rx + 2);
  uint32_t count = get_u32(rx + 6);
  if (offset > t->size_bytes || count > t->size_bytes - offset || count > sizeof(tx) - 1) {
    send_error("output range beyond the tensor or the frame");
    return;
  }
  tx[0] = CMD_OUTPUT_DATA;
  memcpy(tx + 1, t->data + offset, count);
  (void)mtvg_frame_send(tx, count + 1);
}

#ifdef MTVG_PROFILE_POINTS
/* The timer at each mark of the run function (generate --profile): point 0 before its
 * first call, point k after call k. MTVG_PROFILE_POINTS = calls + 1. */
static uint64_t profile_ticks[MTVG_PROFILE_POINTS];
static uint32_t profile_marked; /* points marked since the run began */

void mtvg_profile_mark(uint32_t point);
void mtvg_profile_mark(uint32_t point) {
  if (point < MTVG_PROFILE_POINTS) {
    profile_ticks[point] = mtvg_timer_ticks();
    if (point >= profile_marked) {
      profile_marked = point + 1u;
    }
  }
}

/* 'P' first(u32) */
static void handle_profile(int32_t len) {
  if (len != 5) {
    send_error("bad profile request");
    return;
  }
  uint32_t first = get_u32(rx + 1);
  size_t n = 0;
  tx[n++] = CMD_PROFILE_DATA;
  put_u32(tx + n, profile_marked);
  n += 4;
  put_u32(tx + n, first);
  n += 4;
  for (uint32_t p = first; p < profile_marked && n + 8 <= sizeof(tx); p++, n += 8) {
    put_u64(tx + n, profile_ticks[p]);
  }
  (void)mtvg_frame_send(tx, n);
}
#endif

static void handle_run(void) {
  TVMAPISetLastError("");
#ifdef MTVG_PROFILE_POINTS
  profile_marked = 0;
#endif
  mtvg_timer_align(); /* the same tick count on every run under QEMU -icount */
  uint64_t start = mtvg_timer_ticks();
  int32_t status = mtvg_model_run();
  uint64_t ticks = mtvg_timer_ticks() - start;
  size_t n = 0;
  tx[n++] = CMD_DONE;
  put_u32(tx + n, (uint32_t)status);
  n += 4;
  put_u64(tx + n, ticks);
  n += 8;
  put_u64(tx + n, mtvg_timer_hz());
  n += 8;
  put_u32(tx + n, (uint32_t)mtvg_workspace_peak());
  n += 4;
  put_u32(tx + n, mtvg_frame_errors());
  n += 4;
  const char* msg = mtvg_accel_failed() ? mtvg_accel_message() : TVMGetLastError();
  size_t msg_len = strlen(msg);
  if (msg_len > sizeof(tx) - n) {
    msg_len = sizeof(tx) - n;
  }
  memcpy(tx + n, msg, msg_len);
  n += msg_len;
  (void)mtvg_frame_send(tx, n);
}

/* Counters as text lines "accelerator counter value\n", cut at the frame's end. */
static size_t counters_len;

static void append_text(const char* s) {
  while (*s != '\0' && counters_len < sizeof(tx)) {
    tx[counters_len++] = (uint8_t)*s++;
  }
}

static void emit_counter(const char* accelerator, const char* counter, uint64_t value) {
  char digits[21];
  size_t n = 0;
  do {
    digits[sizeof(digits) - 1 - ++n] = (char)('0' + value % 10u);
    value /= 10u;
  } while (value != 0u && n < sizeof(digits) - 1);
  digits[sizeof(digits) - 1] = '\0';
  append_text(accelerator);
  append_text(" ");
  append_text(counter);
  append_text(" ");
  append_text(&digits[sizeof(digits) - 1 - n]);
  append_text("\n");
}

static void handle_counters(void) {
  counters_len = 0;
  tx[counters_len++] = CMD_COUNTERS_TEXT;
  for (uint32_t i = 0; i < mtvg_model_num_accel_counters; i++) {
    mtvg_model_accel_counters[i](emit_counter);
  }
  (void)mtvg_frame_send(tx, counters_len);
}

int main(void) {
  mtvg_platform_init();
  if (mtvg_model_init() != MTVG_OK) {
    send_error(TVMGetLastError());
    mtvg_platform_exit(MTVG_EXIT_SETUP_FAILED);
  }
  for (;;) {
    int32_t len = mtvg_frame_receive(rx);
    if (len < 0) {
      return MTVG_EXIT_OK; /* the host closed the link */
    }
    if (len == 0) {
      send_error("empty frame");
      continue;
    }
    switch (rx[0]) {
      case CMD_HELLO_REQUEST:
        send_hello(len);
        break;
      case CMD_INPUT:
        handle_input(len);
        break;
      case CMD_RUN:
        handle_run();
        break;
      case CMD_OUTPUT:
        handle_output(len);
        break;
      case CMD_COUNTERS:
        handle_counters();
        break;
#ifdef MTVG_PROFILE_POINTS
      case CMD_PROFILE: /* without --profile: an unknown command, no code at all */
        handle_profile(len);
        break;
#endif
      case CMD_QUIT:
        mtvg_platform_exit(len >= 5 ? (int)get_u32(rx + 1) : MTVG_EXIT_OK);
      default:
        send_error("unknown command");
        break;
    }
  }
}
