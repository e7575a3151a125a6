/*
 * microtvm-gen host-driven application: the device side of `microtvm-gen serve`.
 *
 * The device runs an RPC server (mtvg/rpc_server.h) behind the session layer of the host
 * link (mtvg/session.h). The host bridge starts a session, then forwards the packets of a
 * stock tvm.rpc client; each request gets exactly one reply (kShutdown none). Boot and
 * session starts are announced on the Log channel.
 */
#include "mtvg/platform.h"
#include "mtvg/rpc_server.h"
#include "mtvg/runtime.h"
#include "mtvg/session.h"

#ifndef MTVG_RPC_WORKSPACE_BYTES
#define MTVG_RPC_WORKSPACE_BYTES 0u
#endif

/* Arena for TVMBackendAllocWorkspace calls made by the functions. */
static uint8_t workspace[MTVG_RPC_WORKSPACE_BYTES + MTVG_WORKSPACE_ALIGN]
    __attribute__((aligned(MTVG_WORKSPACE_ALIGN)));

int main(void) {
  mtvg_platform_init();
  mtvg_workspace_init(workspace, sizeof(workspace));
  mtvg_rpc_reset();
  mtvg_session_boot();
  mtvg_session_log(mtvg_rpc_banner());
  for (;;) {
    const uint8_t* packet = 0;
    size_t n = 0;
    mtvg_session_event_t event = mtvg_session_next(&packet, &n);
    if (event == MTVG_SESSION_CLOSED) {
      return MTVG_EXIT_OK;
    }
    if (event == MTVG_SESSION_RESET) {
      mtvg_rpc_reset();
      mtvg_workspace_init(workspace, sizeof(workspace));
      continue;
    }
    size_t reply = mtvg_rpc_handle(packet, n, mtvg_session_reply_buffer(),
                                   MTVG_SESSION_MAX_PACKET, MTVG_SESSION_MAX_PACKET);
    (void)mtvg_session_reply(reply);
  }
}
