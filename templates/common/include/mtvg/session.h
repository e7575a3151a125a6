/*
 * microtvm-gen runtime: the session layer of the host link (device side).
 *
 * Every frame payload starts with a 3-byte header: u16 LE session id, u8 message type.
 * The bytes of message types 0x00-0x03 and 0x10 are microTVM's (docs/link.md):
 *   0x00 StartSessionInit   host -> device, 1 byte: version 1; header id = host nonce
 *   0x01 StartSessionReply  device -> host, 1 byte: version 1; id = host | device << 8
 *   0x02 TerminateSession   either way, no body, id 0 (the device sends it at boot)
 *   0x03 Log                device -> host, text without NUL, id 0
 *   0x10 Normal             one RPC packet (u64 length + body), id = the session's
 * Two message types are ours, for a link that loses or damages bytes:
 *   0x11 Sequenced          u8 seq, one RPC packet, u32 LE CRC-32 of seq + packet. The
 *                           device answers with the same seq. A request that repeats the
 *                           last seq is a retransmission: the device sends its cached reply
 *                           again and does not run the request twice.
 *   0x12 Nak                device -> host, no body: "a damaged frame or junk arrived";
 *                           the host retransmits its outstanding request at once.
 * The device is always the responder: the host starts every session.
 */
#ifndef MTVG_SESSION_H_
#define MTVG_SESSION_H_

#include <stddef.h>
#include <stdint.h>

#include "mtvg/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MTVG_MSG_START_INIT 0x00u
#define MTVG_MSG_START_REPLY 0x01u
#define MTVG_MSG_TERMINATE 0x02u
#define MTVG_MSG_LOG 0x03u
#define MTVG_MSG_NORMAL 0x10u
#define MTVG_MSG_SEQUENCED 0x11u
#define MTVG_MSG_NAK 0x12u

/*! \brief Session protocol version carried by StartSessionInit/Reply. */
#define MTVG_SESSION_VERSION 1u
/*! \brief Bytes of the session header: u16 session id, u8 message type. */
#define MTVG_SESSION_HEADER_BYTES 3u
/*! \brief Extra bytes of a Sequenced message: u8 seq before, u32 CRC-32 after the packet. */
#define MTVG_SEQUENCED_EXTRA_BYTES 5u
/*! \brief Largest RPC packet (with its u64 length prefix) one message carries. */
#define MTVG_SESSION_MAX_PACKET \
  (MTVG_LINK_MAX_PAYLOAD - MTVG_SESSION_HEADER_BYTES - MTVG_SEQUENCED_EXTRA_BYTES)
/*! \brief Longest log text sent; longer text is cut. */
#define MTVG_SESSION_MAX_LOG 200u

/*! \brief What mtvg_session_next() found. */
typedef enum {
  MTVG_SESSION_CLOSED = MTVG_LINK_CLOSED, /*!< the link closed */
  MTVG_SESSION_REQUEST = 0, /*!< an RPC packet to answer with mtvg_session_reply() */
  MTVG_SESSION_RESET = 1,   /*!< the host started or ended a session: drop all RPC state */
} mtvg_session_event_t;

/*!
 * \brief Start the session layer after boot: sends FE and a TerminateSession frame, which
 * tells a listening host that the device (re)started.
 */
void mtvg_session_boot(void);

/*!
 * \brief Wait for the next request. Handles session starts and ends, retransmitted
 * Sequenced requests (cached reply sent again), and damaged frames (a Nak is sent) inside.
 * \param packet set to the RPC packet (u64 length prefix included) on MTVG_SESSION_REQUEST
 * \param n set to its length in bytes
 */
mtvg_session_event_t mtvg_session_next(const uint8_t** packet, size_t* n);

/*! \brief Where to build the reply to the current request (MTVG_SESSION_MAX_PACKET bytes). */
uint8_t* mtvg_session_reply_buffer(void);

/*!
 * \brief Send the reply (n bytes from mtvg_session_reply_buffer()) to the current request,
 * as the request's message type and seq. n == 0 means "this request has no reply".
 * \return MTVG_OK, or MTVG_FAILED if the link failed or n is too large.
 */
int mtvg_session_reply(size_t n);

/*! \brief Send a Log message with text (cut at MTVG_SESSION_MAX_LOG bytes). */
void mtvg_session_log(const char* text);

/*! \brief CRC-32 (IEEE 802.3, reflected 0xEDB88320) update; start at 0, as zlib's crc32. */
uint32_t mtvg_crc32_update(uint32_t crc, const uint8_t* data, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_SESSION_H_ */
