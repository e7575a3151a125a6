/*
 * microtvm-gen runtime: the framing layer of the host link.
 *
 * Wire format (microTVM-compatible): FF FD, u32 LE payload length, payload, u16 LE CRC.
 * Every FF byte of length, payload and CRC is sent as FF FF. The CRC (CCITT-FALSE) covers
 * the wire bytes from FF FD to the end of the escaped payload. Receivers skip FE outside
 * frames and FF FE inside them; FF FD inside a frame starts a new frame.
 */
#include "mtvg/platform.h"
#include "mtvg/runtime.h"

#define FRAME_CHUNK 64u /* bytes staged before each mtvg_link_write */

static uint32_t frame_errors;

/* CRC-16/CCITT (polynomial 0x1021) four bits at a time: entry i is the CRC register's
 * change when its top nibble is i (32 bytes of flash; about a third of the bit loop's
 * instructions per byte, which every byte over the link pays). */
static const uint16_t crc16_nibble[16] = {
    0x0000u, 0x1021u, 0x2042u, 0x3063u, 0x4084u, 0x50A5u, 0x60C6u, 0x70E7u,
    0x8108u, 0x9129u, 0xA14Au, 0xB16Bu, 0xC18Cu, 0xD1ADu, 0xE1CEu, 0xF1EFu};

uint16_t mtvg_crc16_update(uint16_t crc, const uint8_t* data, size_t n) {
  for (size_t i = 0; i < n; i++) {
    crc = (uint16_t)((uint16_t)(crc << 4) ^ crc16_nibble[(crc >> 12) ^ (data[i] >> 4)]);
    crc = (uint16_t)((uint16_t)(crc << 4) ^ crc16_nibble[(crc >> 12) ^ (data[i] & 0x0Fu)]);
  }
  return crc;
}

typedef struct {
  uint8_t buf[FRAME_CHUNK];
  size_t used;
  uint16_t crc;
  int failed;
} frame_writer_t;

static void writer_flush(frame_writer_t* w) {
  if (w->used > 0 && !w->failed) {
    if (mtvg_link_write(w->buf, w->used) != 0) {
      w->failed = 1;
    }
  }
  w->used = 0;
}

static void writer_put(frame_writer_t* w, uint8_t byte, int in_crc) {
  if (w->used == sizeof(w->buf)) {
    writer_flush(w);
  }
  w->buf[w->used++] = byte;
  if (in_crc) {
    w->crc = mtvg_crc16_update(w->crc, &byte, 1);
  }
}

static void writer_put_escaped(frame_writer_t* w, const uint8_t* data, size_t n, int in_crc) {
  for (size_t i = 0; i < n; i++) {
    writer_put(w, data[i], in_crc);
    if (data[i] == MTVG_FRAME_ESC) {
      writer_put(w, MTVG_FRAME_ESC, in_crc);
    }
  }
}

int mtvg_frame_send_parts(const uint8_t* head, size_t head_n, const uint8_t* body,
                          size_t body_n) {
  if (head_n > MTVG_LINK_MAX_PAYLOAD || body_n > MTVG_LINK_MAX_PAYLOAD - head_n) {
    return MTVG_FAILED;
  }
  size_t n = head_n + body_n;
  frame_writer_t w = {.used = 0, .crc = 0xFFFFu, .failed = 0};
  uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
  writer_put(&w, MTVG_FRAME_ESC, 1);
  writer_put(&w, MTVG_FRAME_START, 1);
  writer_put_escaped(&w, len, sizeof(len), 1);
  writer_put_escaped(&w, head, head_n, 1);
  writer_put_escaped(&w, body, body_n, 1);
  uint8_t crc[2] = {(uint8_t)w.crc, (uint8_t)(w.crc >> 8)};
  writer_put_escaped(&w, crc, sizeof(crc), 0);
  writer_flush(&w);
  mtvg_link_flush();
  return w.failed ? MTVG_FAILED : MTVG_OK;
}

int mtvg_frame_send(const uint8_t* payload, size_t n) {
  return mtvg_frame_send_parts(payload, n, NULL, 0);
}

int mtvg_frame_send_nop(void) {
  const uint8_t nop = MTVG_FRAME_NOP;
  return mtvg_link_write(&nop, 1);
}

uint32_t mtvg_frame_errors(void) { return frame_errors; }

/* Reads one logical byte inside a frame. Returns the byte (0..255), MTVG_LINK_CLOSED,
 * MTVG_FRAME_RESTART when FF FD restarts the frame, or MTVG_FRAME_INVALID on an invalid
 * escape. Adds wire bytes to *crc. */
static int read_frame_byte(uint16_t* crc) {
  uint8_t b;
  for (;;) {
    if (mtvg_link_read(&b, 1) != 0) {
      return MTVG_LINK_CLOSED;
    }
    if (b != MTVG_FRAME_ESC) {
      *crc = mtvg_crc16_update(*crc, &b, 1);
      return b;
    }
    uint8_t next;
    if (mtvg_link_read(&next, 1) != 0) {
      return MTVG_LINK_CLOSED;
    }
    if (next == MTVG_FRAME_ESC) {
      uint8_t pair[2] = {MTVG_FRAME_ESC, MTVG_FRAME_ESC};
      *crc = mtvg_crc16_update(*crc, pair, 2);
      return MTVG_FRAME_ESC;
    }
    if (next == MTVG_FRAME_NOP) {
      continue;
    }
    if (next == MTVG_FRAME_START) {
      return MTVG_FRAME_RESTART;
    }
    return MTVG_FRAME_INVALID;
  }
}

/* Set once junk outside frames has been reported, cleared at the next start marker: a run
 * of junk is one damage report, not one per byte. */
static int junk_reported;

/* Waits for FF FD outside a frame. Returns MTVG_OK when found, MTVG_LINK_CLOSED, or
 * MTVG_FRAME_DAMAGED at the first byte of a run of junk (anything but FE and FF FD). */
static int hunt_start(void) {
  uint8_t b;
  int saw_esc = 0;
  for (;;) {
    if (mtvg_link_read(&b, 1) != 0) {
      return MTVG_LINK_CLOSED;
    }
    if (saw_esc && b == MTVG_FRAME_START) {
      junk_reported = 0;
      return MTVG_OK;
    }
    saw_esc = (b == MTVG_FRAME_ESC);
    if (!saw_esc && b != MTVG_FRAME_NOP && !junk_reported) {
      junk_reported = 1;
      frame_errors++;
      return MTVG_FRAME_DAMAGED;
    }
  }
}

/* Set when FF FD ended a damaged frame: the next frame's start is already consumed. */
static int start_pending;

int32_t mtvg_frame_receive_checked(uint8_t* buf) {
  if (!start_pending) {
    int found = hunt_start();
    if (found != MTVG_OK) {
      return found;
    }
  }
  start_pending = 0;
  const uint8_t start[2] = {MTVG_FRAME_ESC, MTVG_FRAME_START};
  uint16_t crc = mtvg_crc16_update(0xFFFFu, start, 2);
  uint32_t len = 0;
  int c = 0;
  for (int i = 0; i < 4; i++) {
    c = read_frame_byte(&crc);
    if (c < 0) {
      break;
    }
    len |= (uint32_t)c << (8 * i);
  }
  if (c >= 0 && len > MTVG_LINK_MAX_PAYLOAD) {
    c = MTVG_FRAME_INVALID;
  }
  for (uint32_t i = 0; c >= 0 && i < len; i++) {
    c = read_frame_byte(&crc);
    if (c >= 0) {
      buf[i] = (uint8_t)c;
    }
  }
  uint16_t got = 0;
  uint16_t ignored = 0;
  for (int i = 0; c >= 0 && i < 2; i++) {
    c = read_frame_byte(&ignored);
    if (c >= 0) {
      got |= (uint16_t)((uint16_t)c << (8 * i));
    }
  }
  if (c == MTVG_LINK_CLOSED) {
    return MTVG_LINK_CLOSED;
  }
  if (c == MTVG_FRAME_RESTART) {
    start_pending = 1;
  }
  if (c < 0 || got != crc) {
    frame_errors++;
    return MTVG_FRAME_DAMAGED;
  }
  return (int32_t)len;
}

int32_t mtvg_frame_receive(uint8_t* buf) {
  for (;;) {
    int32_t len = mtvg_frame_receive_checked(buf);
    if (len != MTVG_FRAME_DAMAGED) {
      return len;
    }
  }
}
