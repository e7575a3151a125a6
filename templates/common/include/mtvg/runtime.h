/*
 * microtvm-gen runtime: configuration knobs and the runtime's own API.
 *
 * Every limit of the runtime is a macro in the first section; each can be overridden
 * with -D at build time. Nothing in the runtime calls malloc: all memory is static and
 * sized by these macros or by the generated model glue.
 */
#ifndef MTVG_RUNTIME_H_
#define MTVG_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#include "mtvg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Configuration (override with -D) -------------------------------------------------- */

/*! \brief ABI version of this runtime; the generator refuses to mix versions. */
#define MTVG_RUNTIME_ABI_VERSION 2

/*! \brief Alignment of every workspace block, in bytes (TVM assumes 16 at most). */
#ifndef MTVG_WORKSPACE_ALIGN
#define MTVG_WORKSPACE_ALIGN 16
#endif

/*! \brief Most workspace blocks live at the same time (depth of the LIFO check stack). */
#ifndef MTVG_WORKSPACE_MAX_LIVE
#define MTVG_WORKSPACE_MAX_LIVE 64
#endif

/*! \brief Bytes kept of the error message (TVMAPISetLastError), including the NUL. */
#ifndef MTVG_LAST_ERROR_BYTES
#define MTVG_LAST_ERROR_BYTES 128
#endif

/*! \brief Largest frame payload the device accepts or sends, in bytes. */
#ifndef MTVG_LINK_MAX_PAYLOAD
#define MTVG_LINK_MAX_PAYLOAD 1024
#endif

/* ---- Workspace arena ------------------------------------------------------------------- */

/*!
 * \brief Give the workspace allocator its arena. Call once before running the model.
 * base need not be aligned; the usable size shrinks by the alignment padding.
 */
void mtvg_workspace_init(uint8_t* base, size_t size);

/*! \brief Bytes of the arena in use now (0 between model runs). */
size_t mtvg_workspace_used(void);

/*! \brief Most bytes ever in use since mtvg_workspace_init(), padding included. */
size_t mtvg_workspace_peak(void);

/*! \brief Allocations refused since mtvg_workspace_init() (arena full or too deep). */
uint32_t mtvg_workspace_failures(void);

/* ---- Framing (microTVM-compatible bytes; docs/link.md) --------------------------------- */

/*! \brief Escape byte: FF FF on the wire is one FF of data; FF FD starts a frame. */
#define MTVG_FRAME_ESC 0xFFu
/*! \brief A byte receivers skip (alone outside a frame, as FF FE inside one). */
#define MTVG_FRAME_NOP 0xFEu
/*! \brief Follows MTVG_FRAME_ESC to start a frame. */
#define MTVG_FRAME_START 0xFDu

/*! \brief CRC-16/CCITT-FALSE update: poly 0x1021, MSB first, no reflection. Start at 0xFFFF. */
uint16_t mtvg_crc16_update(uint16_t crc, const uint8_t* data, size_t n);

/*!
 * \brief Send one frame: FF FD, u32 length, payload, u16 CRC, with every FF escaped as FF FF.
 * \return MTVG_OK, or MTVG_FAILED if the link failed or n > MTVG_LINK_MAX_PAYLOAD.
 */
int mtvg_frame_send(const uint8_t* payload, size_t n);

/*! \brief Send one frame whose payload is head followed by body (either may be empty). */
int mtvg_frame_send_parts(const uint8_t* head, size_t head_n, const uint8_t* body,
                          size_t body_n);

/*! \brief Send a lone FE: receivers skip it; it marks a fresh start of our byte stream. */
int mtvg_frame_send_nop(void);

/*!
 * \brief Receive one frame into buf (capacity MTVG_LINK_MAX_PAYLOAD), reporting damage.
 * \return payload length (>= 0); MTVG_FRAME_DAMAGED after dropping a frame with a bad CRC,
 * escape or length, or at the first byte of junk between frames (once per run of junk);
 * MTVG_LINK_CLOSED when the link closed.
 */
int32_t mtvg_frame_receive_checked(uint8_t* buf);

/*!
 * \brief Receive the next intact frame into buf (capacity MTVG_LINK_MAX_PAYLOAD).
 * Bytes before a start marker, frames with a bad CRC, bad escapes or an oversize length
 * are dropped, and the search goes on.
 * \return payload length (>= 0), or MTVG_LINK_CLOSED when the link closed.
 */
int32_t mtvg_frame_receive(uint8_t* buf);

/*! \brief Frames dropped by mtvg_frame_receive() because of CRC, escape or length errors. */
uint32_t mtvg_frame_errors(void);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_RUNTIME_H_ */
