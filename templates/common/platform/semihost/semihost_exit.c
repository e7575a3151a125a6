/*
 * microtvm-gen board ports under QEMU: the end of a program through semihosting, which
 * QEMU turns into its own process exit status. For the ports whose port.toml names the
 * semihost layer.
 */
#include <stdint.h>

#include "mtvg/platform.h"
#include "semihost.h"

/* Host exit statuses are 8 bits wide; a nonzero status must never read as success. */
#define MTVG_EXIT_STATUS_MASK 0xFFu
#define MTVG_EXIT_STATUS_FALLBACK 1u

/*
 * status 0: SYS_EXIT with ADP_Stopped_ApplicationExit, QEMU exits with 0.
 * otherwise: SYS_EXIT_EXTENDED with {ADP_Stopped_ApplicationExit, status}; QEMU (7.2,
 * AArch32 and RISC-V too) exits with that subcode. Plain SYS_EXIT cannot carry a status on
 * a 32-bit target: QEMU maps every other reason code to exit status 1.
 */
void mtvg_platform_exit(int status) {
  mtvg_link_flush();
  if (status == 0) {
    (void)mtvg_semihost(MTVG_SH_SYS_EXIT, MTVG_SH_ADP_STOPPED_APPLICATION_EXIT);
  } else {
    uint32_t code = (uint32_t)status & MTVG_EXIT_STATUS_MASK;
    volatile uint32_t block[2];
    block[0] = MTVG_SH_ADP_STOPPED_APPLICATION_EXIT;
    block[1] = code != 0u ? code : MTVG_EXIT_STATUS_FALLBACK;
    (void)mtvg_semihost(MTVG_SH_SYS_EXIT_EXTENDED, (uintptr_t)block);
  }
  /* Only reached if the host ignored the request: try the generic failure exit, then park. */
  (void)mtvg_semihost(MTVG_SH_SYS_EXIT, MTVG_SH_ADP_STOPPED_RUNTIME_ERROR_UNKNOWN);
  for (;;) {
  }
}

/* The C library's exit() and abort() (newlib, picolibc) end here. */
void _exit(int status) __attribute__((noreturn));
void _exit(int status) { mtvg_platform_exit(status); }
