/*
 * microtvm-gen runtime: a TVM 0.27 RPC server for host-driven mode.
 *
 * It answers the packets a stock `tvm.rpc` client sends for the host-driven workflow:
 * system_lib(), get_function, tensors (allocate, copy in pieces, free), calls and
 * time_evaluator. docs/host-driven.md lists the requests, globals and handles. Anything
 * else gets an exception packet, and the stream stays in sync: the server is given one
 * whole packet at a time.
 *
 * Functions are the system library's (TVMSystemLibEntryPoint, mtvg/../tvm/runtime/crt/
 * module.h), called through the legacy packed ABI. Tensor memory comes from one static
 * pool; nothing calls malloc.
 */
#ifndef MTVG_RPC_SERVER_H_
#define MTVG_RPC_SERVER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Limits (override with -D) ----------------------------------------------------------- */

/*! \brief Bytes of the tensor pool that kDevAllocDataWithScope allocates from. */
#ifndef MTVG_RPC_POOL_BYTES
#define MTVG_RPC_POOL_BYTES 65536u
#endif

/*! \brief Most tensors allocated at the same time. */
#ifndef MTVG_RPC_MAX_ALLOCS
#define MTVG_RPC_MAX_ALLOCS 32u
#endif

/*! \brief Most arguments of one call. */
#ifndef MTVG_RPC_MAX_ARGS
#define MTVG_RPC_MAX_ARGS 16u
#endif

/*! \brief Most dimensions of a tensor argument. */
#ifndef MTVG_RPC_MAX_NDIM
#define MTVG_RPC_MAX_NDIM 6u
#endif

/*! \brief Most time evaluators alive at the same time. */
#ifndef MTVG_RPC_MAX_TIMERS
#define MTVG_RPC_MAX_TIMERS 8u
#endif

/*! \brief Most repeats of one time evaluator (the reply carries one f64 each). */
#ifndef MTVG_RPC_MAX_REPEAT
#define MTVG_RPC_MAX_REPEAT 64u
#endif

/*! \brief Most calls of the kernel in one measurement of a time evaluator (its `number`,
 * given or grown to reach min_repeat_ms). */
#ifndef MTVG_RPC_MAX_NUMBER
#define MTVG_RPC_MAX_NUMBER 0x40000000u
#endif

/*! \brief Bytes for the string arguments of one call, each with its NUL. */
#ifndef MTVG_RPC_STRING_BYTES
#define MTVG_RPC_STRING_BYTES 256u
#endif

/*! \brief Alignment of tensor data, in bytes (what TVM's CPU allocator gives). */
#define MTVG_RPC_TENSOR_ALIGN 64u

/* ---- API ----------------------------------------------------------------------------------- */

/*! \brief Drop every tensor, timer and handle: a new client or session starts. */
void mtvg_rpc_reset(void);

/*!
 * \brief Answer one RPC packet.
 * \param packet the packet: u64 LE length of the rest, i32 code, body
 * \param n bytes of packet
 * \param reply where the reply packet goes
 * \param cap capacity of reply (at least 64 bytes; copies never exceed it)
 * \param max_packet the largest packet the link carries, u64 prefix included: reported to
 *        the client as tvm.rpc.server.GetCRTMaxPacketSize, so copies come in pieces that fit
 * \return bytes of the reply; 0 when the packet has no reply (kShutdown)
 */
size_t mtvg_rpc_handle(const uint8_t* packet, size_t n, uint8_t* reply, size_t cap,
                       size_t max_packet);

/*!
 * \brief The reply to a packet too large to hold: an exception naming its size and the
 * link's limit. The caller has read (and dropped) the packet's bytes.
 * \param nbytes bytes of the refused packet, u64 prefix included
 * \return bytes of the reply (an exception packet)
 */
size_t mtvg_rpc_refuse_packet(uint64_t nbytes, uint8_t* reply, size_t cap, size_t max_packet);

/*! \brief Bytes of the tensor pool in use now. */
size_t mtvg_rpc_pool_used(void);

/*! \brief Functions the system library offers. */
uint32_t mtvg_rpc_function_count(void);

/*! \brief "rpc server: N functions, M bytes of tensor memory" (valid until the next call). */
const char* mtvg_rpc_banner(void);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_RPC_SERVER_H_ */
