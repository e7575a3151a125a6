/*
 * microtvm-gen runtime: configuration knobs and the runtime's own API.
 *
 * Nothing in the runtime calls malloc: all memory is static and sized by the limits below
 * or by the generated model glue. The headers in include/mtvg/ are the runtime's ABI
 * spec; the generator reads the constants it shares with the C code from them
 * (generator/abi.py), and return codes are all in mtvg/status.h.
 *
 * Index of every limit (each a macro in the header named; "-D" marks the ones a build may
 * override, "gen" the ones the generator sets for each project):
 *
 *   runtime.h        MTVG_WORKSPACE_ALIGN         -D      alignment of a workspace block
 *   runtime.h        MTVG_WORKSPACE_MAX_LIVE      -D gen  workspace blocks live at once
 *   runtime.h        MTVG_LAST_ERROR_BYTES        -D      bytes kept of the error message
 *   runtime.h        MTVG_LINK_MAX_PAYLOAD        -D gen  largest frame payload (gen: RPC)
 *   session.h        MTVG_SESSION_MAX_PACKET              largest RPC packet in a message
 *   session.h        MTVG_SESSION_MAX_LOG                 longest log text sent
 *   accel.h          MTVG_ACCEL_MESSAGE_BYTES             bytes kept of a driver's message
 *   graph.h          MTVG_GRAPH_MAX_NODES         -D gen  nodes of a graph
 *   graph.h          MTVG_GRAPH_MAX_ENTRIES       -D gen  node outputs
 *   graph.h          MTVG_GRAPH_MAX_STORAGE       -D gen  storage ids
 *   graph.h          MTVG_GRAPH_MAX_INPUT_REFS    -D gen  operator inputs, whole graph
 *   graph.h          MTVG_GRAPH_MAX_HEADS         -D gen  graph outputs
 *   graph.h          MTVG_GRAPH_MAX_NDIM          -D gen  dimensions of a tensor
 *   graph.h          MTVG_GRAPH_MAX_OP_ARGS       -D gen  tensors of one operator call
 *   graph.h          MTVG_GRAPH_MAX_JSON_DEPTH    -D      nesting of skipped JSON values
 *   graph.h          MTVG_GRAPH_MAX_NAME_BYTES    -D      longest name in the graph
 *   graph.h          MTVG_REGISTRY_MAX_FUNCS      -D      functions of a registry
 *   graph.h          MTVG_GRAPH_STORAGE_ALIGN             alignment of a storage buffer
 *   rpc_server.h     MTVG_RPC_POOL_BYTES          -D gen  tensor pool of the RPC server
 *   rpc_server.h     MTVG_RPC_MAX_ALLOCS          -D      tensors allocated at once
 *   rpc_server.h     MTVG_RPC_MAX_ARGS            -D      arguments of one call
 *   rpc_server.h     MTVG_RPC_MAX_NDIM            -D      dimensions of a tensor argument
 *   rpc_server.h     MTVG_RPC_MAX_TIMERS          -D      time evaluators alive at once
 *   rpc_server.h     MTVG_RPC_MAX_REPEAT          -D      repeats of one time evaluator
 *   rpc_server.h     MTVG_RPC_MAX_NUMBER          -D      calls per time evaluator measurement
 *   rpc_server.h     MTVG_RPC_STRING_BYTES        -D      string arguments of one call
 *   rpc_server.h     MTVG_RPC_TENSOR_ALIGN                alignment of tensor data
 *   port_cortex_m.h  MTVG_RX_RING_BYTES           -D      UART bytes received ahead
 *   port_cortex_m.h  MTVG_PLACED_MEMORY           -D gen  reset walks the --place tables
 *
 * Outside the runtime: the host-driven application's MTVG_RPC_WORKSPACE_BYTES (gen,
 * templates/crt/src/rpc_main.c) and each board port's clock, baud rate and fault stack
 * (templates/common/platform/<port>/). tests/test_abi.py checks this index against the
 * headers.
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

/*!
 * \brief ABI version of this runtime; the generator refuses to mix versions.
 *
 * generator/__init__.py reads it from here; the generated model glue checks it with
 * #error, and the standalone application sends it in its hello, which `run` compares.
 *
 * Add one when a project generated before the change could build against this runtime,
 * or a host could talk to its firmware, and then go wrong: a function the generated glue
 * or code calls or defines (mtvg/model.h, mtvg/accel.h, TVM's legacy API in tvm/runtime/)
 * changes its signature or meaning; a struct the glue fills in or Python sizes changes its
 * layout; a status or exit code changes its value or meaning (mtvg/status.h); a byte of
 * the host link changes (framing, session, the application's commands, docs/link.md); the
 * default of a limit the host relies on without setting it changes (MTVG_LINK_MAX_PAYLOAD
 * of standalone projects). Not for: a new function, a new code in a reserved range, a new
 * limit, the default of a limit the generator sets ("gen" in the index above), changes
 * inside templates/common/src that keep the behaviour the headers describe.
 */
#define MTVG_RUNTIME_ABI_VERSION 3

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
