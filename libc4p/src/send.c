/* A whole frame onto the agent's socket (non-blocking: a few short waits, then give up).
 *
 * Why its own file: the session's thread sends HELLO (session.c) and REPORT frames (report.c)
 * the same way; kept in session.c, session.c and report.c called each other. */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "internal.h"

c4p_result c4p_send_all(int fd, const uint8_t *buf, size_t len) {
  for (int waits = 0; len > 0;) {
    ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN && waits++ < 10) { /* the socket is non-blocking */
      struct pollfd p = {fd, POLLOUT, 0};
      poll(&p, 1, 100);
      continue;
    }
    if (w <= 0) return C4P_ECONNECT;
    buf += w;
    len -= (size_t)w;
  }
  return C4P_OK;
}
