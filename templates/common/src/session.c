/*
 * microtvm-gen runtime: the session layer of the host link (device side).
 * Message types and bytes: mtvg/session.h and docs/link.md.
 */
#include <string.h>

#include "mtvg/platform.h"
#include "mtvg/session.h"

/* Offsets inside the reply buffer: header, seq, then the packet. */
#define REPLY_PACKET_OFFSET (MTVG_SESSION_HEADER_BYTES + 1u)
#define CRC32_BYTES 4u
/* First device nonce; every reply regenerates it, so it only needs to be non-zero. */
#define SESSION_FIRST_NONCE 0x5Au

typedef enum { STATE_NO_SESSION, STATE_ESTABLISHED } session_state_t;

static uint8_t rx[MTVG_LINK_MAX_PAYLOAD];
static uint8_t tx[MTVG_LINK_MAX_PAYLOAD];

static session_state_t state;
static uint16_t session_id;
static uint8_t device_nonce = SESSION_FIRST_NONCE;

/* The request being answered and the cache for retransmitted Sequenced requests. */
static uint8_t request_type;
static uint8_t request_seq;
static int reply_cached;
static uint8_t cached_seq;
static size_t cached_bytes;

static const uint32_t crc32_nibbles[16] = {
    0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u,
    0x4DB26158u, 0x5005713Cu, 0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu,
    0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu};

uint32_t mtvg_crc32_update(uint32_t crc, const uint8_t* data, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; i++) {
    c ^= data[i];
    c = (c >> 4) ^ crc32_nibbles[c & 0xFu];
    c = (c >> 4) ^ crc32_nibbles[c & 0xFu];
  }
  return ~c;
}

static uint8_t next_nonce(uint8_t n) {
  uint8_t r = (uint8_t)((uint8_t)((n << 5) | (n >> 5)) + 1u);
  return r == 0 ? 1u : r;
}

static void put_header(uint8_t* h, uint16_t id, uint8_t type) {
  h[0] = (uint8_t)id;
  h[1] = (uint8_t)(id >> 8);
  h[2] = type;
}

static void send_control(uint16_t id, uint8_t type, const uint8_t* body, size_t n) {
  uint8_t h[MTVG_SESSION_HEADER_BYTES];
  put_header(h, id, type);
  (void)mtvg_frame_send_parts(h, sizeof(h), body, n);
}

void mtvg_session_boot(void) {
  state = STATE_NO_SESSION;
  session_id = 0;
  reply_cached = 0;
  (void)mtvg_frame_send_nop();
  send_control(0, MTVG_MSG_TERMINATE, NULL, 0);
}

void mtvg_session_log(const char* text) {
  size_t n = strlen(text);
  send_control(0, MTVG_MSG_LOG, (const uint8_t*)text, n < MTVG_SESSION_MAX_LOG ? n : MTVG_SESSION_MAX_LOG);
}

static uint32_t get_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

static void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

/* The host's StartSessionInit: answer it and start a fresh session. */
static void accept_session(uint8_t host_nonce) {
  device_nonce = next_nonce(device_nonce);
  session_id = (uint16_t)(host_nonce | ((uint16_t)device_nonce << 8));
  state = STATE_ESTABLISHED;
  reply_cached = 0;
  const uint8_t version = MTVG_SESSION_VERSION;
  send_control(session_id, MTVG_MSG_START_REPLY, &version, 1);
}

static void send_nak(void) {
  if (state == STATE_ESTABLISHED) {
    send_control(session_id, MTVG_MSG_NAK, NULL, 0);
  }
}

mtvg_session_event_t mtvg_session_next(const uint8_t** packet, size_t* n) {
  for (;;) {
    int32_t len = mtvg_frame_receive_checked(rx);
    if (len == MTVG_LINK_CLOSED) {
      return MTVG_SESSION_CLOSED;
    }
    if (len < (int32_t)MTVG_SESSION_HEADER_BYTES) {
      send_nak(); /* damaged, junk, or too short to be a message */
      continue;
    }
    uint16_t id = (uint16_t)(rx[0] | (rx[1] << 8));
    uint8_t type = rx[2];
    size_t body = (size_t)len - MTVG_SESSION_HEADER_BYTES;
    const uint8_t* data = rx + MTVG_SESSION_HEADER_BYTES;
    if (type == MTVG_MSG_START_INIT) {
      if (body == 1 && data[0] == MTVG_SESSION_VERSION && (id & 0xFFu) != 0 && (id >> 8) == 0) {
        accept_session((uint8_t)id);
        return MTVG_SESSION_RESET;
      }
      continue;
    }
    if (type == MTVG_MSG_TERMINATE) {
      if (state == STATE_ESTABLISHED) {
        state = STATE_NO_SESSION;
        session_id = 0;
        reply_cached = 0;
        return MTVG_SESSION_RESET;
      }
      continue;
    }
    if (state != STATE_ESTABLISHED) {
      /* A request although no session exists: the device restarted and the host missed
       * the TerminateSession sent at boot. Tell it again. */
      if (type == MTVG_MSG_NORMAL || type == MTVG_MSG_SEQUENCED) {
        send_control(0, MTVG_MSG_TERMINATE, NULL, 0);
      }
      continue;
    }
    if (id != session_id) {
      continue; /* a message of an older session */
    }
    if (type == MTVG_MSG_NORMAL) {
      request_type = type;
      *packet = data;
      *n = body;
      return MTVG_SESSION_REQUEST;
    }
    if (type != MTVG_MSG_SEQUENCED) {
      continue;
    }
    if (body < MTVG_SEQUENCED_EXTRA_BYTES ||
        mtvg_crc32_update(0, data, body - CRC32_BYTES) != get_u32(data + body - CRC32_BYTES)) {
      send_nak();
      continue;
    }
    if (reply_cached && data[0] == cached_seq) {
      (void)mtvg_frame_send(tx, cached_bytes); /* a retransmission: answer it again */
      continue;
    }
    request_type = type;
    request_seq = data[0];
    *packet = data + 1;
    *n = body - MTVG_SEQUENCED_EXTRA_BYTES;
    return MTVG_SESSION_REQUEST;
  }
}

uint8_t* mtvg_session_reply_buffer(void) { return tx + REPLY_PACKET_OFFSET; }

int mtvg_session_reply(size_t n) {
  if (n > MTVG_SESSION_MAX_PACKET) {
    return MTVG_FAILED;
  }
  if (request_type == MTVG_MSG_NORMAL) {
    if (n == 0) {
      return MTVG_OK;
    }
    uint8_t h[MTVG_SESSION_HEADER_BYTES];
    put_header(h, session_id, MTVG_MSG_NORMAL);
    return mtvg_frame_send_parts(h, sizeof(h), tx + REPLY_PACKET_OFFSET, n);
  }
  reply_cached = 0;
  if (n == 0) {
    return MTVG_OK;
  }
  put_header(tx, session_id, MTVG_MSG_SEQUENCED);
  tx[MTVG_SESSION_HEADER_BYTES] = request_seq;
  size_t covered = 1u + n;
  put_u32(tx + MTVG_SESSION_HEADER_BYTES + covered,
          mtvg_crc32_update(0, tx + MTVG_SESSION_HEADER_BYTES, covered));
  cached_bytes = MTVG_SESSION_HEADER_BYTES + covered + CRC32_BYTES;
  cached_seq = request_seq;
  reply_cached = 1;
  return mtvg_frame_send(tx, cached_bytes);
}
