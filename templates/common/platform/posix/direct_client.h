/*
 * microtvm-gen host port: direct clients (the host board's fast path of `serve`).
 *
 * `microtvm-gen serve` starts the host-driven firmware process with one end of a Unix
 * socket pair in MTVG_DIRECT_FD_ENV. After a client's TVM RPC handshake, serve may hand the
 * client's TCP socket over that pair; the firmware then answers the client's RPC packets on
 * the socket itself (no bridge, no framing) until the session ends, and says why with one
 * byte on the pair. The link (stdin/stdout) stays the session layer's: serve sends the
 * end-of-session kShutdown there, as for a bridged client.
 *
 * At start the firmware sends DIRECT_HELLO on the pair: serve hands clients only to a
 * firmware that said it takes them.
 * Handover (serve -> firmware): DIRECT_HANDOVER_BYTES of data, 'D' then u32 LE idle
 * timeout in ms (0: none), with two descriptors (SCM_RIGHTS): the client's socket and a
 * file of DIRECT_STATE_BYTES the firmware maps shared. The state file is how serve finds
 * where the client's stream stands when the firmware dies during a session:
 *   offset 0  u32 phase      DIRECT_PHASE_*
 *   offset 4  u32 requests   packets read whole so far (wraps): with the phase, how serve
 *                            tells one request answered for too long (a hung firmware)
 *   offset 8  u64 packet     bytes of the packet being read (u64 prefix included; phase >= 1)
 *   offset 16 u64 consumed   bytes of that packet read from the socket so far
 *   offset 24 u64 written    bytes of the reply sent so far (phase 3)
 *   offset 32 u8[8] prefix   the packet's first bytes as read (its length field)
 * Each counter is updated right after the read or write it counts.
 */
#ifndef MTVG_POSIX_DIRECT_CLIENT_H_
#define MTVG_POSIX_DIRECT_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

/*! \brief Environment variable naming the firmware's end of the socket pair. */
#define MTVG_DIRECT_FD_ENV "MTVG_DIRECT_FD"
/*! \brief Bytes of a handover message: 'D', u32 LE idle timeout in ms. */
#define DIRECT_HANDOVER_BYTES 5u
#define DIRECT_HANDOVER 'D'
/*! \brief The firmware's first byte on the pair: "I take clients". */
#define DIRECT_HELLO 'H'
/*! \brief Bytes of the shared state file. */
#define DIRECT_STATE_BYTES 64u
/*! \brief A larger length field is not TVM RPC: the session ends (DIRECT_END_NOT_RPC). */
#define DIRECT_MAX_CLIENT_PACKET (1ull << 28)

/* Phases of the shared state. */
#define DIRECT_PHASE_PREFIX 0u /* waiting for, or reading, a packet's length field */
#define DIRECT_PHASE_BODY 1u   /* reading the rest of the packet */
#define DIRECT_PHASE_ANSWER 2u /* the packet is read; its reply is owed */
#define DIRECT_PHASE_REPLY 3u  /* writing the reply */

/* Why a session ended: the byte the firmware sends on the pair. */
#define DIRECT_END_CLOSED 'E'  /* the client closed its end (or its socket failed) */
#define DIRECT_END_SHUTDOWN 'S' /* the client sent kShutdown (not run: serve sends one) */
#define DIRECT_END_IDLE 'I'    /* nothing from the client within the idle timeout */
#define DIRECT_END_NOT_RPC 'N' /* a length field over DIRECT_MAX_CLIENT_PACKET */
#define DIRECT_END_REFUSED 'R' /* the handover was malformed; the socket was not served */

/*! \brief The pair's descriptor from the environment, or -1 (none, or no RPC server). */
int mtvg_posix_direct_fd(void);

/*!
 * \brief Receive one handover on `pair` and serve that client to its session's end.
 * \return 0 when the pair stays usable, -1 when serve closed it (stop watching it)
 */
int mtvg_posix_serve_direct(int pair);

#endif /* MTVG_POSIX_DIRECT_CLIENT_H_ */
