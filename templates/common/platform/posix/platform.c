/*
 * microtvm-gen board port for a host process (Linux, macOS): the link is stdin/stdout,
 * the timer is CLOCK_MONOTONIC in nanoseconds, exit is exit(). A host-driven firmware also
 * watches the pair `serve` hands clients over (direct_client.h) while it waits for input.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "direct_client.h"
#include "mtvg/platform.h"

#define LINK_READ_BUFFER 4096 /* bytes read from stdin at once */

static uint8_t read_buf[LINK_READ_BUFFER];
static size_t read_pos;
static size_t read_len;
static uint64_t start_ns;
static int direct_pair = -1;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void mtvg_platform_init(void) {
  start_ns = now_ns();
  direct_pair = mtvg_posix_direct_fd();
}

/* Wait for input on stdin; serve the clients handed over meanwhile. */
static void wait_for_input(void) {
  while (direct_pair >= 0) {
    struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN, .revents = 0},
                          {.fd = direct_pair, .events = POLLIN, .revents = 0}};
    int ready = poll(p, 2, -1);
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready < 0 || p[0].revents != 0) {
      return;
    }
    if (p[1].revents != 0 && mtvg_posix_serve_direct(direct_pair) != 0) {
      close(direct_pair);
      direct_pair = -1;
    }
  }
}

int mtvg_link_read(uint8_t* buf, size_t n) {
  while (n > 0) {
    if (read_pos == read_len) {
      wait_for_input();
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
