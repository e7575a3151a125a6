/*
 * microtvm-gen Cortex-M ports for QEMU machines (the qemu_m layer): the newlib system calls,
 * for the ports whose port.toml names this layer.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "semihost.h"

/* ---- newlib system calls -------------------------------------------------------------- */
/*
 * Just enough for stdio (printf) and malloc; _exit is the semihost layer's. No rdimon/nosys
 * specs needed.
 * fd 0/1/2 are "terminals": reads return end of file, writes go to the semihosting
 * console through SYS_WRITE0 (in chunks; NUL bytes through SYS_WRITEC).
 */

#define MTVG_STDIN_FD 0
#define MTVG_STDERR_FD 2
#define MTVG_CONSOLE_CHUNK 128u

int _close(int fd);
int _fstat(int fd, struct stat* st);
int _getpid(void);
int _isatty(int fd);
int _kill(int pid, int sig);
off_t _lseek(int fd, off_t offset, int whence);
int _read(int fd, void* buf, size_t len);
void* _sbrk(ptrdiff_t increment);
int _write(int fd, const void* buf, size_t len);

extern uint8_t __heap_start__[];
extern uint8_t __heap_end__[];

static int is_console(int fd) { return fd >= MTVG_STDIN_FD && fd <= MTVG_STDERR_FD; }

void* _sbrk(ptrdiff_t increment) {
  static uint8_t* s_break = NULL;
  if (s_break == NULL) {
    s_break = __heap_start__;
  }
  size_t room_up = (size_t)(__heap_end__ - s_break);
  size_t room_down = (size_t)(s_break - __heap_start__);
  if ((increment > 0 && (size_t)increment > room_up) ||
      (increment < 0 && (size_t)(-increment) > room_down)) {
    errno = ENOMEM;
    return (void*)-1;
  }
  uint8_t* previous = s_break;
  s_break += increment;
  return previous;
}

int _write(int fd, const void* buf, size_t len) {
  static char chunk[MTVG_CONSOLE_CHUNK + 1u];
  if (!is_console(fd) || fd == MTVG_STDIN_FD) {
    errno = EBADF;
    return -1;
  }
  const char* bytes = (const char*)buf;
  size_t used = 0u;
  for (size_t i = 0u; i < len; ++i) {
    if (bytes[i] != '\0') {
      chunk[used++] = bytes[i];
    }
    if (used == MTVG_CONSOLE_CHUNK || bytes[i] == '\0' || i + 1u == len) {
      chunk[used] = '\0';
      if (used != 0u) {
        mtvg_semihost_puts(chunk);
      }
      used = 0u;
    }
    if (bytes[i] == '\0') {
      (void)mtvg_semihost(MTVG_SH_SYS_WRITEC, (uintptr_t)&bytes[i]);
    }
  }
  return (int)len;
}

int _read(int fd, void* buf, size_t len) {
  (void)buf;
  (void)len;
  if (!is_console(fd)) {
    errno = EBADF;
    return -1;
  }
  return 0; /* end of file */
}

int _close(int fd) {
  if (!is_console(fd)) {
    errno = EBADF;
    return -1;
  }
  return 0;
}

off_t _lseek(int fd, off_t offset, int whence) {
  (void)offset;
  (void)whence;
  errno = is_console(fd) ? ESPIPE : EBADF;
  return (off_t)-1;
}

int _fstat(int fd, struct stat* st) {
  if (!is_console(fd)) {
    errno = EBADF;
    return -1;
  }
  memset(st, 0, sizeof(*st));
  st->st_mode = S_IFCHR; /* character device: newlib line-buffers it */
  return 0;
}

int _isatty(int fd) {
  if (!is_console(fd)) {
    errno = EBADF;
    return 0;
  }
  return 1;
}

int _getpid(void) { return 1; }

int _kill(int pid, int sig) {
  (void)pid;
  (void)sig;
  errno = EINVAL;
  return -1;
}
