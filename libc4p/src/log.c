/* The library's log: one line through the application's callback, if it set one.
 *
 * Why its own file: every part of a session logs (the agent connection in session.c, the static
 * file in static.c); kept in session.c, static.c and session.c called each other (session opens
 * the static file, the static file logs through session). Here both depend on this file only. */
#include <stdio.h>

#include "internal.h"

void c4p_log(c4p_session *s, int level, const char *fmt, ...) {
  if (s == NULL || s->log == NULL || level > s->log_level) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s->log(s->log_user, level, buf);
}
