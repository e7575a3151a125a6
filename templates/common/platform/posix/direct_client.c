/*
 * microtvm-gen host port: direct clients (direct_client.h says the protocol).
 *
 * Only a host-driven firmware (MTVG_HOST_DRIVEN, set by the generator) has an RPC server;
 * a standalone app gets the two functions that say "no pair".
 */
#define _DEFAULT_SOURCE
#include "direct_client.h"

#if MTVG_HOST_DRIVEN
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mtvg/rpc_server.h"
#include "mtvg/session.h"

#ifndef MSG_NOSIGNAL /* macOS: SO_NOSIGPIPE on the socket instead */
#define MSG_NOSIGNAL 0
#endif

#define PREFIX_BYTES 8u
#define DRAIN_CHUNK 4096u
#define RPC_SHUTDOWN 1
#define FDS_PER_HANDOVER 2

typedef struct {
  uint32_t phase;
  uint32_t requests;
  uint64_t packet;
  uint64_t consumed;
  uint64_t written;
  uint8_t prefix[PREFIX_BYTES];
} direct_state_t;

typedef char direct_state_fits[sizeof(direct_state_t) <= DIRECT_STATE_BYTES ? 1 : -1];

/* The session layer's packet limit applies here too: the client learns it from
 * GetCRTMaxPacketSize, whichever way its packets come. */
static uint8_t request[MTVG_SESSION_MAX_PACKET] __attribute__((aligned(16)));
static uint8_t reply[MTVG_SESSION_MAX_PACKET] __attribute__((aligned(16)));
static uint8_t drain[DRAIN_CHUNK];

int mtvg_posix_direct_fd(void) {
  const char* text = getenv(MTVG_DIRECT_FD_ENV);
  if (text == NULL) {
    return -1;
  }
  char* end = NULL;
  long fd = strtol(text, &end, 10);
  if (end == text || *end != '\0' || fd < 3 || fd > 65535) {
    return -1;
  }
  char hello = DIRECT_HELLO;
  return send((int)fd, &hello, 1, MSG_NOSIGNAL) == 1 ? (int)fd : -1;
}

/* Wait until `fd` has bytes; 0, or the end reason (idle timeout, failure). Serve writes
 * nothing on the link during a session: input there means it is closing the link (it is
 * stopping), and the session ends so that this process sees its input end at once. */
static int wait_readable(int fd, int idle_ms) {
  for (;;) {
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN, .revents = 0},
                          {.fd = STDIN_FILENO, .events = POLLIN, .revents = 0}};
    int ready = poll(p, 2, idle_ms > 0 ? idle_ms : -1);
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready < 0 || p[1].revents != 0) {
      return DIRECT_END_CLOSED;
    }
    return ready == 0 ? DIRECT_END_IDLE : 0;
  }
}

/* Read exactly n bytes of the current packet into dst, counting them in the state. */
static int read_counted(int fd, uint8_t* dst, size_t n, volatile direct_state_t* st,
                        int idle_ms) {
  while (n > 0) {
    int why = wait_readable(fd, idle_ms);
    if (why != 0) {
      return why;
    }
    ssize_t got = recv(fd, dst, n, 0);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return DIRECT_END_CLOSED;
    }
    st->consumed += (uint64_t)got;
    dst += got;
    n -= (size_t)got;
  }
  return 0;
}

static int write_counted(int fd, const uint8_t* src, size_t n, volatile direct_state_t* st) {
  while (n > 0) {
    ssize_t put = send(fd, src, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) {
      continue;
    }
    if (put <= 0) {
      return DIRECT_END_CLOSED;
    }
    st->written += (uint64_t)put;
    src += put;
    n -= (size_t)put;
  }
  return 0;
}

static uint64_t prefix_length(const uint8_t* p) {
  uint64_t v = 0;
  for (unsigned i = 0; i < PREFIX_BYTES; i++) {
    v |= (uint64_t)p[i] << (8u * i);
  }
  return v;
}

/* One packet: read it, answer it. 0 to go on, or the end reason. */
static int serve_packet(int fd, volatile direct_state_t* st, int idle_ms) {
  st->phase = DIRECT_PHASE_PREFIX;
  st->packet = 0;
  st->consumed = 0;
  st->written = 0;
  int why = read_counted(fd, (uint8_t*)st->prefix, PREFIX_BYTES, st, idle_ms);
  if (why != 0) {
    return why;
  }
  uint64_t body = prefix_length((const uint8_t*)st->prefix);
  if (body > DIRECT_MAX_CLIENT_PACKET) {
    return DIRECT_END_NOT_RPC;
  }
  st->packet = PREFIX_BYTES + body;
  st->phase = DIRECT_PHASE_BODY;
  if (body == 0) {
    return 0; /* an empty packet: nothing to answer */
  }
  size_t n;
  if (st->packet > MTVG_SESSION_MAX_PACKET) {
    for (uint64_t left = body; left > 0;) {
      size_t piece = left < DRAIN_CHUNK ? (size_t)left : DRAIN_CHUNK;
      why = read_counted(fd, drain, piece, st, idle_ms);
      if (why != 0) {
        return why;
      }
      left -= piece;
    }
    st->requests++;
    st->phase = DIRECT_PHASE_ANSWER;
    n = mtvg_rpc_refuse_packet(st->packet, reply, sizeof(reply), MTVG_SESSION_MAX_PACKET);
  } else {
    memcpy(request, (const uint8_t*)st->prefix, PREFIX_BYTES);
    why = read_counted(fd, request + PREFIX_BYTES, (size_t)body, st, idle_ms);
    if (why != 0) {
      return why;
    }
    st->requests++;
    st->phase = DIRECT_PHASE_ANSWER;
    int32_t code = (int32_t)((uint32_t)request[8] | (uint32_t)request[9] << 8 |
                             (uint32_t)request[10] << 16 | (uint32_t)request[11] << 24);
    if (body >= 4 && code == RPC_SHUTDOWN) {
      return DIRECT_END_SHUTDOWN;
    }
    n = mtvg_rpc_handle(request, (size_t)st->packet, reply, sizeof(reply),
                        MTVG_SESSION_MAX_PACKET);
  }
  st->phase = DIRECT_PHASE_REPLY;
  return n > 0 ? write_counted(fd, reply, n, st) : 0;
}

static int receive_handover(int pair, int fds[FDS_PER_HANDOVER], uint32_t* idle_ms) {
  uint8_t data[DIRECT_HANDOVER_BYTES];
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int) * FDS_PER_HANDOVER)];
  } control;
  struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  memset(&control, 0, sizeof(control));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.bytes;
  msg.msg_controllen = sizeof(control.bytes);
  ssize_t got;
  do {
    got = recvmsg(pair, &msg, 0);
  } while (got < 0 && errno == EINTR);
  if (got <= 0) {
    return -1; /* serve closed the pair */
  }
  int received = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
      continue;
    }
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (received < FDS_PER_HANDOVER) {
        fds[received++] = fd;
      } else {
        close(fd);
      }
    }
  }
  if ((size_t)got != sizeof(data) || data[0] != DIRECT_HANDOVER ||
      received != FDS_PER_HANDOVER || (msg.msg_flags & MSG_CTRUNC)) {
    for (int i = 0; i < received; i++) {
      close(fds[i]);
    }
    return 0;
  }
  *idle_ms = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 |
             (uint32_t)data[4] << 24;
  return 1;
}

int mtvg_posix_serve_direct(int pair) {
  int fds[FDS_PER_HANDOVER] = {-1, -1};
  uint32_t idle_ms = 0;
  int got = receive_handover(pair, fds, &idle_ms);
  if (got < 0) {
    return -1;
  }
  char why = DIRECT_END_REFUSED;
  struct stat state_file;
  if (got > 0 && fstat(fds[1], &state_file) == 0 &&
      state_file.st_size >= (off_t)DIRECT_STATE_BYTES) {
    void* shared = mmap(NULL, DIRECT_STATE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    if (shared != MAP_FAILED) {
#ifdef SO_NOSIGPIPE
      int on = 1;
      (void)setsockopt(fds[0], SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof(on));
      (void)setsockopt(pair, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof(on));
#endif
      volatile direct_state_t* st = (volatile direct_state_t*)shared;
      int idle = idle_ms > (uint32_t)0x7fffffff ? 0x7fffffff : (int)idle_ms;
      int end;
      do {
        end = serve_packet(fds[0], st, idle);
      } while (end == 0);
      why = (char)end;
      munmap(shared, DIRECT_STATE_BYTES);
    }
  }
  for (int i = 0; i < FDS_PER_HANDOVER; i++) {
    if (fds[i] >= 0) {
      close(fds[i]);
    }
  }
  ssize_t put;
  do {
    put = send(pair, &why, 1, MSG_NOSIGNAL);
  } while (put < 0 && errno == EINTR);
  return put == 1 ? 0 : -1;
}

#else /* a standalone app: nothing is handed over */

int mtvg_posix_direct_fd(void) { return -1; }

int mtvg_posix_serve_direct(int pair) {
  (void)pair;
  return -1;
}

#endif /* MTVG_HOST_DRIVEN */
