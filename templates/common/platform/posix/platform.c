/*
 * microtvm-gen board port for a host process (Linux, macOS): the link is stdin/stdout,
 * the timer is CLOCK_MONOTONIC in nanoseconds, exit is exit().
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "mtvg/platform.h"

#define LINK_READ_BUFFER 4096 /* bytes read from stdin at once */

static uint8_t read_buf[LINK_READ_BUFFER];
static size_t read_pos;
static size_t read_len;
static uint64_t start_ns;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void mtvg_platform_init(void) { start_ns = now_ns(); }

int mtvg_link_read(uint8_t* buf, size_t n) {
  while (n > 0) {
    if (read_pos == read_len) {
      ssize_t got = read(STDIN_FILENO, read_buf, sizeof(read_buf));
      if (got < 0 && errno == EINTR) {
        continue;
      }
      if (got <= 0) {
        return MTVG_LINK_CLOSED;
      }
      read_pos = 0;
      read_len = (size_t)got;
    }
    size_t take = read_len - read_pos;
    if (take > n) {
      take = n;
    }
    for (size_t i = 0; i < take; i++) {
      buf[i] = read_buf[read_pos + i];
    }
    read_pos += take;
    buf += take;
    n -= take;
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  while (n > 0) {
    ssize_t put = write(STDOUT_FILENO, buf, n);
    if (put < 0 && errno == EINTR) {
      continue;
    }
    if (put <= 0) {
      return MTVG_LINK_CLOSED;
    }
    buf += put;
    n -= (size_t)put;
  }
  return MTVG_OK;
}

void mtvg_link_flush(void) {}

uint64_t mtvg_timer_ticks(void) { return now_ns() - start_ns; }

uint64_t mtvg_timer_hz(void) { return 1000000000u; }

void mtvg_timer_align(void) {}

void mtvg_platform_exit(int status) { exit(status); }
