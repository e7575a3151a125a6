/*
 * Test harness for the vanilla device model and driver (tests/test_vanilla_device.py).
 *
 *   vanilla_harness CASES OUT
 *
 * CASES is a sequence of records (little-endian int32 unless said otherwise):
 *   op            1 conv2d_f32, 2 conv2d_s8, 3 dense_s8; +0x100: program the registers with
 *                 vanilla_program_*, apply the overrides, then vanilla_execute("raw")
 *   nparams, params[nparams]   the functions' int32 arguments, in order
 *   nbuf, then per buffer (the functions' pointer arguments, in order):
 *                 kind (0 NULL, 1 data, 2 alias), a, b
 *                 data:  a = bytes, b = byte offset in its allocation; then a bytes
 *                 alias: a = index of an earlier buffer, b = byte offset into it
 *   noverrides, then (register byte offset, value) pairs
 * OUT gets, per record: status, message length, message, the last buffer's length and
 * bytes (the output), then STATUS ERR_REG ERR_INDEX ERR_VALUE ERR_LO ERR_HI CMD_SEQ
 * CNT_ERRORS; at the end the counter count and per counter: name length, name, uint64.
 * The harness is test code: it allocates each buffer with exactly its size (so ASan sees
 * any read or write past it).
 *
 * Built with -DVANILLA_HARNESS_EMBEDDED for a board (QEMU), it takes CASES from the
 * generated header vanilla_cases.h (vanilla_cases[], vanilla_cases_bytes), prints OUT on
 * the board's link (its UART, QEMU's stdout) as lines "H <hex>" followed by "END", and
 * takes buffers from a static arena instead of the heap (the RISC-V port has none).
 */
#include <stdint.h>
#include <string.h>
#ifdef VANILLA_HARNESS_EMBEDDED
#include "mtvg/platform.h"
#else
#include <stdio.h>
#include <stdlib.h>
#endif

#include "mtvg/accel.h"
#include "vanilla.h"
#include "vanilla_device.h"

#define MAX_PARAMS 32
#define MAX_BUFFERS 8
#define MAX_OVERRIDES 16
#define MAX_COUNTERS 8
#define RAW_FLAG 0x100

typedef struct {
  unsigned char* base;
  unsigned char* data;
  int32_t bytes;
  int owned;
} buffer_t;

static struct {
  char name[32];
  uint64_t value;
} counters[MAX_COUNTERS];
static int counter_count;

#ifdef VANILLA_HARNESS_EMBEDDED
#include "vanilla_cases.h"

#define HEX_LINE_BYTES 48
#define ARENA_BYTES (512u * 1024u)

static unsigned char arena[ARENA_BYTES];
static size_t arena_used;

static void console(const char* text) {
  (void)mtvg_link_write((const uint8_t*)text, strlen(text));
}

static void die(const char* what) {
  console("DIE ");
  console(what);
  console("\n");
  mtvg_link_flush();
  mtvg_platform_exit(3);
}

static uint64_t timer_start;

static void put_u64_line(const char* tag, uint64_t v) {
  char digits[24];
  size_t n = sizeof(digits) - 1;
  digits[n] = '\0';
  do {
    digits[--n] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v != 0u && n > 0);
  console(tag);
  console(digits + n);
  console("\n");
}

/* "T <ticks>" per record: the driver call's time on the board's timer (see "HZ"). */
static void start_timer(void) { timer_start = mtvg_timer_ticks(); }

static void stop_timer(void) { put_u64_line("T ", mtvg_timer_ticks() - timer_start); }

static void* harness_alloc(size_t n) {
  void* p;
  n = (n + 7u) & ~(size_t)7u;
  if (n > ARENA_BYTES - arena_used) return NULL;
  p = arena + arena_used;
  arena_used += n;
  return p;
}

static void harness_free(void* p) {
  (void)p;
  arena_used = 0; /* one record's buffers at a time */
}

static size_t in_at;
static unsigned char hex_pending[HEX_LINE_BYTES];
static size_t hex_used;

static int take(void* dst, size_t n) {
  if (n > vanilla_cases_bytes - in_at) {
    return 0;
  }
  memcpy(dst, vanilla_cases + in_at, n);
  in_at += n;
  return 1;
}

static void flush_hex(void) {
  static const char digits[] = "0123456789abcdef";
  char line[2 + 2 * HEX_LINE_BYTES + 2];
  size_t i, at = 0;
  if (hex_used == 0) return;
  line[at++] = 'H';
  line[at++] = ' ';
  for (i = 0; i < hex_used; ++i) {
    line[at++] = digits[hex_pending[i] >> 4];
    line[at++] = digits[hex_pending[i] & 0xF];
  }
  line[at++] = '\n';
  line[at] = '\0';
  console(line);
  hex_used = 0;
}

static void write_bytes(const void* p, size_t n) {
  const unsigned char* bytes = p;
  size_t i;
  for (i = 0; i < n; ++i) {
    hex_pending[hex_used++] = bytes[i];
    if (hex_used == HEX_LINE_BYTES) flush_hex();
  }
}
#else
static FILE* in_file;
static FILE* out_file;

static void die(const char* what) {
  fprintf(stderr, "vanilla_harness: %s\n", what);
  exit(3);
}

static void start_timer(void) {}

static void stop_timer(void) {}

static void* harness_alloc(size_t n) { return malloc(n); }

static void harness_free(void* p) { free(p); }

static int take(void* dst, size_t n) { return fread(dst, 1, n, in_file) == n; }

static void write_bytes(const void* p, size_t n) {
  if (n != 0 && fwrite(p, 1, n, out_file) != n) {
    die("write failed");
  }
}
#endif

static int read_i32(int32_t* v) { return take(v, sizeof(*v)); }

static int32_t need_i32(void) {
  int32_t v;
  if (!read_i32(&v)) {
    die("truncated case file");
  }
  return v;
}

static void write_i32(int32_t v) { write_bytes(&v, sizeof(v)); }

static void emit(const char* accelerator, const char* counter, uint64_t value) {
  if (strcmp(accelerator, "vanilla") != 0 || counter_count >= MAX_COUNTERS) {
    die("unexpected counter");
  }
  strncpy(counters[counter_count].name, counter, sizeof(counters[0].name) - 1);
  counters[counter_count].value = value;
  ++counter_count;
}

static void* ptr(buffer_t* b) { return b->data; }

static int32_t run(int32_t op, const int32_t* p, int32_t np, buffer_t* b, int32_t nb) {
  int raw = (op & RAW_FLAG) != 0;
  switch (op & ~RAW_FLAG) {
    case 1:
      if (np != 15 || nb != 4) die("conv2d_f32 takes 15 params and 4 buffers");
      if (raw) {
        vanilla_program_conv2d_f32(ptr(&b[0]), ptr(&b[1]), ptr(&b[2]), ptr(&b[3]), p[0], p[1],
                                   p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11],
                                   p[12], p[13], p[14]);
        return -1;
      }
      return vanilla_conv2d_f32(ptr(&b[0]), ptr(&b[1]), ptr(&b[2]), ptr(&b[3]), p[0], p[1], p[2],
                                p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12],
                                p[13], p[14]);
    case 2:
      if (np != 18 || nb != 6) die("conv2d_s8 takes 18 params and 6 buffers");
      if (raw) {
        vanilla_program_conv2d_s8(ptr(&b[0]), ptr(&b[1]), ptr(&b[2]), ptr(&b[3]), ptr(&b[4]),
                                  ptr(&b[5]), p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7],
                                  p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16],
                                  p[17]);
        return -1;
      }
      return vanilla_conv2d_s8(ptr(&b[0]), ptr(&b[1]), ptr(&b[2]), ptr(&b[3]), ptr(&b[4]),
                               ptr(&b[5]), p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                               p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17]);
    case 3:
      if (np != 7 || nb != 6) die("dense_s8 takes 7 params and 6 buffers");
      if (raw) {
        vanilla_program_dense_s8(ptr(&b[0]), ptr(&b[1]), ptr(&b[2]), ptr(&b[3]), ptr(&b[4]),
                                 ptr(&b[5]), p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
        return -1;
      }
      return vanilla_dense_s8(ptr(&b[0]), ptr(&b[1]), ptr(&b[2]), ptr(&b[3]), ptr(&b[4]),
                              ptr(&b[5]), p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
    default:
      die("unknown op");
  }
  return -1;
}

static void one_record(int32_t op) {
  int32_t params[MAX_PARAMS];
  buffer_t buffers[MAX_BUFFERS];
  int32_t np = need_i32();
  int32_t nb, no, i, status;
  const char* message;
  if (np < 0 || np > MAX_PARAMS) die("bad parameter count");
  for (i = 0; i < np; ++i) params[i] = need_i32();
  nb = need_i32();
  if (nb < 1 || nb > MAX_BUFFERS) die("bad buffer count");
  memset(buffers, 0, sizeof(buffers));
  for (i = 0; i < nb; ++i) {
    int32_t kind = need_i32(), a = need_i32(), b = need_i32();
    if (kind == 1) {
      if (a < 0 || b < 0 || b > 64) die("bad data buffer");
      buffers[i].base = harness_alloc(a + b > 0 ? (size_t)a + (size_t)b : 1u);
      if (buffers[i].base == NULL) die("out of memory");
      buffers[i].data = buffers[i].base + b;
      buffers[i].bytes = a;
      buffers[i].owned = 1;
      if (a != 0 && !take(buffers[i].data, (size_t)a)) die("truncated data");
    } else if (kind == 2) {
      if (a < 0 || a >= i || b < 0 || b > buffers[a].bytes) die("bad alias");
      buffers[i].data = buffers[a].data + b;
    } else if (kind != 0) {
      die("bad buffer kind");
    }
  }
  mtvg_accel_clear();
  start_timer();
  status = run(op, params, np, buffers, nb);
  no = need_i32();
  if (no < 0 || no > MAX_OVERRIDES) die("bad override count");
  for (i = 0; i < no; ++i) {
    int32_t offset = need_i32(), value = need_i32();
    if (!(op & RAW_FLAG) || offset < 0 || offset >= (int32_t)VANILLA_REGS_BYTES || offset % 4)
      die("bad override");
    *(volatile uint32_t*)((volatile unsigned char*)VANILLA + offset) = (uint32_t)value;
  }
  if (op & RAW_FLAG) {
    status = mtvg_accel_check(vanilla_execute("raw"));
  } else {
    status = mtvg_accel_check(status);
  }
  stop_timer();
  message = mtvg_accel_message();
  write_i32(status);
  write_i32((int32_t)strlen(message));
  write_bytes(message, strlen(message));
  write_i32(buffers[nb - 1].bytes);
  write_bytes(buffers[nb - 1].data, (size_t)buffers[nb - 1].bytes);
  {
    uint32_t regs[8];
    regs[0] = VANILLA->STATUS;
    regs[1] = VANILLA->ERR_REG;
    regs[2] = VANILLA->ERR_INDEX;
    regs[3] = VANILLA->ERR_VALUE;
    regs[4] = VANILLA->ERR_LO;
    regs[5] = VANILLA->ERR_HI;
    regs[6] = VANILLA->CMD_SEQ;
    regs[7] = VANILLA->CNT_ERRORS;
    write_bytes(regs, sizeof(regs));
  }
  for (i = 0; i < nb; ++i) {
    if (buffers[i].owned) harness_free(buffers[i].base);
  }
}

static void write_counters(void) {
  int i;
  vanilla_counters(emit);
  write_i32(counter_count);
  for (i = 0; i < counter_count; ++i) {
    write_i32((int32_t)strlen(counters[i].name));
    write_bytes(counters[i].name, strlen(counters[i].name));
    write_bytes(&counters[i].value, sizeof(counters[i].value));
  }
}

#ifdef VANILLA_HARNESS_EMBEDDED
int main(void) {
  int32_t op;
  mtvg_platform_init();
  put_u64_line("HZ ", mtvg_timer_hz());
  if (VANILLA->ID != VANILLA_ID_VALUE) die("ID register");
  while (read_i32(&op)) {
    one_record(op);
  }
  write_counters();
  flush_hex();
  console("END\n");
  mtvg_link_flush();
  return 0;
}
#else
int main(int argc, char** argv) {
  int32_t op;
  if (argc != 3) die("usage: vanilla_harness CASES OUT");
  in_file = fopen(argv[1], "rb");
  out_file = fopen(argv[2], "wb");
  if (in_file == NULL || out_file == NULL) die("cannot open files");
  if (VANILLA->ID != VANILLA_ID_VALUE) die("ID register");
  while (read_i32(&op)) {
    one_record(op);
  }
  write_counters();
  fclose(in_file);
  if (fclose(out_file) != 0) die("close failed");
  return 0;
}
#endif
