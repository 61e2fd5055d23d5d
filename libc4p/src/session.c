/* A session: the job's bindings on this host, kept current by the library's own thread.
 *
 * Why a local table and a thread: a rank must never wait on the network when it opens a QP, so
 * lookups read a table in memory under a read lock. The thread holds the connection to the
 * agent, applies each BINDINGS message to the table and then calls the re-plan callback with
 * what changed. When the agent goes away the table stays (fail-static) and the thread
 * reconnects with exponential backoff; the agent's WELCOME carries its full set, and only the
 * differences reach the callback. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -- reading frames -------------------------------------------------------------------------- */

/* Read n bytes before the deadline (-1: none), giving up early if the wake pipe fires. */
static c4p_result read_full(c4p_session *s, int fd, uint8_t *buf, size_t n, int64_t deadline) {
  size_t got = 0;
  while (got < n) {
    struct pollfd p[2] = {{fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
    int wait = deadline < 0 ? -1 : (int)(deadline - now_ms());
    if (deadline >= 0 && wait <= 0) return C4P_ETIMEOUT;
    int rc = poll(p, s->wake[0] >= 0 ? 2 : 1, wait);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return C4P_ECONNECT;
    if (rc == 0) return C4P_ETIMEOUT;
    if (s->wake[0] >= 0 && (p[1].revents & POLLIN)) return C4P_ECONNECT; /* closing */
    ssize_t r = recv(fd, buf + got, n - got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return got == 0 ? C4P_ECONNECT : C4P_EPROTO; /* EOF mid-frame: truncated */
    got += (size_t)r;
  }
  return C4P_OK;
}

/* One frame; *payload is malloc'd (free it). EOF before a header is C4P_ECONNECT; a header or
 * payload cut short is C4P_EPROTO. Once a header arrived, the rest must follow in 5 s. */
static c4p_result read_frame(c4p_session *s, int fd, int64_t deadline, c4p_header *h,
                             uint8_t **payload) {
  uint8_t raw[C4P_WIRE_HEADER];
  *payload = NULL;
  c4p_result rc = read_full(s, fd, raw, 1, deadline);
  if (rc != C4P_OK) return rc;
  int64_t rest = now_ms() + 5000;
  rc = read_full(s, fd, raw + 1, C4P_WIRE_HEADER - 1, deadline < 0 || deadline > rest ? rest : deadline);
  if (rc == C4P_ECONNECT) rc = C4P_EPROTO;
  if (rc != C4P_OK) return rc;
  rc = c4p_parse_header(raw, h);
  if (rc != C4P_OK) {
    c4p_log(s, C4P_LOG_ERROR, "c4p: malformed frame header from the agent");
    return rc;
  }
  *payload = malloc(h->length ? h->length : 1);
  if (*payload == NULL) return C4P_ENOMEM;
  rc = read_full(s, fd, *payload, h->length, rest);
  if (rc == C4P_ECONNECT || rc == C4P_ETIMEOUT) rc = C4P_EPROTO;
  if (rc != C4P_OK) {
    free(*payload);
    *payload = NULL;
    c4p_log(s, C4P_LOG_ERROR, "c4p: truncated frame from the agent");
  }
  return rc;
}

/* -- applying bindings ------------------------------------------------------------------------ */

static void read_key(c4p_reader *r, c4p_binding *b) {
  c4p_rd_str(r, b->communicator, C4P_NAME_MAX);
  b->src_rank = c4p_rd_u32(r);
  b->dst_rank = c4p_rd_u32(r);
  b->channel = c4p_rd_u32(r);
  b->qp = c4p_rd_u32(r);
}

/* Apply a binding-set body. `authoritative`: a full set replaces (what it lacks is withdrawn);
 * a full set from an agent that knows nothing yet changes nothing (fail-static). The bindings
 * the callback must hear of are appended to `changed`. The body is checked whole first, so a
 * malformed message changes nothing. */
static c4p_result apply_body(c4p_session *s, c4p_reader *r, int authoritative, c4p_list *changed) {
  size_t start = r->at;
  for (int pass = 0; pass < 2; pass++) {
    r->at = start;
    uint64_t epoch = c4p_rd_u64(r);
    uint8_t kind = c4p_rd_u8(r);
    if (kind != C4P_KIND_FULL && kind != C4P_KIND_DELTA) r->bad = 1;
    uint32_t n = c4p_rd_u32(r);
    uint32_t gen = 0;
    if (pass == 1) {
      pthread_rwlock_wrlock(&s->lock);
      gen = ++s->gen;
    }
    c4p_result rc = C4P_OK;
    for (uint32_t i = 0; i < n && !r->bad; i++) {
      c4p_binding b;
      memset(&b, 0, sizeof b);
      read_key(r, &b);
      b.udp_sport = c4p_rd_u16(r);
      b.flow_label = c4p_rd_u32(r);
      b.epoch = c4p_rd_u64(r);
      if (pass == 0) {
        if (b.udp_sport < 0xC000 || b.flow_label > 0xFFFFF) r->bad = 1;
        continue;
      }
      int fresh = 0;
      rc = c4p_table_put(&s->table, &b, gen, &fresh);
      if (rc == C4P_OK && fresh) rc = c4p_list_push(changed, &b);
      if (rc != C4P_OK) break;
    }
    uint32_t m = c4p_rd_u32(r);
    for (uint32_t i = 0; i < m && !r->bad && rc == C4P_OK; i++) {
      c4p_binding b, old;
      memset(&b, 0, sizeof b);
      read_key(r, &b);
      if (pass == 1 &&
          c4p_table_remove(&s->table, b.communicator, b.src_rank, b.dst_rank, b.channel, b.qp,
                           &old)) {
        old.udp_sport = 0;
        old.flow_label = 0;
        rc = c4p_list_push(changed, &old);
      }
    }
    if (pass == 0) {
      if (r->bad) return C4P_EPROTO;
      continue;
    }
    if (rc == C4P_OK && kind == C4P_KIND_FULL && authoritative) {
      for (size_t i = 0; i < s->table.cap && rc == C4P_OK;) {
        c4p_slot *slot = &s->table.slots[i];
        if (slot->used && slot->gen != gen) {
          c4p_binding old = slot->b;
          c4p_table_remove(&s->table, old.communicator, old.src_rank, old.dst_rank, old.channel,
                           old.qp, NULL);
          old.udp_sport = 0;
          old.flow_label = 0;
          rc = c4p_list_push(changed, &old);
          continue; /* the shift may have moved another entry into slot i */
        }
        i++;
      }
    }
    if (epoch > s->epoch || authoritative) s->epoch = epoch;
    pthread_rwlock_unlock(&s->lock);
    return rc;
  }
  return C4P_EINTERNAL;
}

static void notify(c4p_session *s, const c4p_list *changed) {
  if (changed->len == 0) return;
  pthread_mutex_lock(&s->cb_lock);
  if (s->cb != NULL)
    for (size_t i = 0; i < changed->len; i++) s->cb(s->cb_user, &changed->items[i]);
  pthread_mutex_unlock(&s->cb_lock);
}

/* An ERROR frame's code (its layout is the same in every wire version). */
static c4p_result error_frame(c4p_session *s, const uint8_t *payload, uint32_t len) {
  c4p_reader r = {payload, len, 0, 0};
  uint32_t code = c4p_rd_u32(&r);
  char text[1025];
  c4p_rd_str(&r, text, 1024);
  if (r.bad) return C4P_EPROTO;
  c4p_log(s, C4P_LOG_ERROR, "c4p: the agent refused: %s (%s)", text,
          c4p_strerror((c4p_result)code));
  if (code == 0 || code > C4P_EAPPLY) return C4P_EINTERNAL;
  return (c4p_result)code;
}

/* -- connecting ------------------------------------------------------------------------------ */

/* Connect, check who serves the socket, HELLO, and take the WELCOME (applied to the table). */
static c4p_result agent_connect(c4p_session *s, c4p_list *changed) {
  /* Non-blocking: a connect to an agent whose backlog is full fails at once (EAGAIN) instead
   * of hanging the thread, so c4p_close never waits on it. */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return C4P_ECONNECT;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, s->socket_path, sizeof addr.sun_path - 1);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    c4p_log(s, C4P_LOG_WARN, "c4p: cannot connect to the agent at %s: %s", s->socket_path,
            strerror(errno));
    close(fd);
    return C4P_ECONNECT;
  }
  struct ucred cred;
  socklen_t cl = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
      (cred.uid != 0 && cred.uid != geteuid())) {
    c4p_log(s, C4P_LOG_ERROR, "c4p: %s is served by uid %u, neither root nor this user",
            s->socket_path, (unsigned)cred.uid);
    close(fd);
    return C4P_EPEER;
  }
  uint8_t *hello = NULL;
  size_t len = 0;
  c4p_result rc = c4p_encode_hello(s->wire_version, s->job_id, s->token, &hello, &len);
  /* A send that fails still reads: an agent that refuses the peer says why, then closes,
   * possibly before our HELLO got there. */
  c4p_result sent = rc == C4P_OK ? c4p_send_all(fd, hello, len) : rc;
  free(hello);
  c4p_header h;
  uint8_t *payload = NULL;
  if (rc == C4P_OK) rc = read_frame(s, fd, now_ms() + s->timeout_ms, &h, &payload);
  if (rc != C4P_OK && sent != C4P_OK) rc = sent;
  if (rc == C4P_OK) {
    if (h.type == C4P_MSG_ERROR) {
      rc = error_frame(s, payload, h.length);
    } else if (h.version != (uint16_t)s->wire_version) {
      c4p_log(s, C4P_LOG_ERROR, "c4p: the agent speaks wire version %u, this library %d",
              h.version, s->wire_version);
      rc = C4P_EVERSION;
    } else if (h.type != C4P_MSG_WELCOME) {
      rc = C4P_EPROTO;
    } else {
      c4p_reader r = {payload, h.length, 0, 0};
      uint8_t known = c4p_rd_u8(&r);
      char host[C4P_NAME_MAX + 1];
      c4p_rd_str(&r, host, C4P_NAME_MAX);
      rc = r.bad ? C4P_EPROTO : apply_body(s, &r, known == 1, changed);
      if (rc == C4P_OK && r.at != r.n) rc = C4P_EPROTO;
      if (rc == C4P_OK) c4p_log(s, C4P_LOG_INFO, "c4p: session open on host %s", host);
    }
  }
  free(payload);
  if (rc != C4P_OK) {
    if (rc == C4P_EPROTO) c4p_log(s, C4P_LOG_ERROR, "c4p: malformed answer from the agent");
    close(fd);
    return rc;
  }
  s->fd = fd;
  atomic_store(&s->connected, 1);
  return C4P_OK;
}

static int final_error(c4p_result rc) {
  return rc == C4P_EAUTH || rc == C4P_EPERM || rc == C4P_EPEER || rc == C4P_EVERSION;
}

/* Sleep ms unless woken for close; returns 0 when closing. */
static int nap(c4p_session *s, int ms) {
  struct pollfd p = {s->wake[0], POLLIN, 0};
  int rc = poll(&p, 1, ms);
  return !(rc > 0 && (p.revents & POLLIN)) && !atomic_load(&s->stop);
}

/* 1: the agent's socket has data, 0: time to flush reports, -1: closing. */
static int wait_readable(c4p_session *s) {
  struct pollfd p[2] = {{s->fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
  int rc = poll(p, 2, C4P_REPORT_FLUSH_MS);
  if (rc < 0) return 0;
  if (p[1].revents & POLLIN) return -1;
  return rc > 0 && p[0].revents != 0;
}

static void *follow(void *arg) {
  c4p_session *s = arg;
  int backoff = 100;
  while (!atomic_load(&s->stop)) {
    c4p_list changed = {0};
    if (s->fd < 0) {
      if (!nap(s, backoff)) break;
      backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
      c4p_result rc = agent_connect(s, &changed);
      if (rc == C4P_OK) {
        backoff = 100;
        c4p_log(s, C4P_LOG_INFO, "c4p: reconnected to the agent");
      } else if (final_error(rc)) {
        c4p_log(s, C4P_LOG_ERROR, "c4p: giving up on the agent: %s (ports kept)",
                c4p_strerror(rc));
        c4p_list_free(&changed);
        break;
      }
    } else {
      /* With reports, wake every C4P_REPORT_FLUSH_MS to drain the ring into the same socket. */
      int readable = s->reports == NULL ? 1 : wait_readable(s);
      if (readable < 0) break;
      c4p_result rc = C4P_OK;
      if (readable) {
        c4p_header h;
        uint8_t *payload = NULL;
        rc = read_frame(s, s->fd, -1, &h, &payload);
        if (rc == C4P_OK && h.type == C4P_MSG_BINDINGS && h.version == s->wire_version) {
          c4p_reader r = {payload, h.length, 0, 0};
          rc = apply_body(s, &r, 1, &changed);
          if (rc == C4P_OK && r.at != r.n) rc = C4P_EPROTO;
        } else if (rc == C4P_OK) {
          rc = h.type == C4P_MSG_ERROR ? error_frame(s, payload, h.length) : C4P_EPROTO;
          /* An agent older than reports refuses the first REPORT as a protocol error: stop
           * sending them (they are counted as dropped) rather than reconnect forever. */
          if (rc == C4P_EPROTO && s->reports != NULL && s->reports->sent_on_conn) {
            atomic_store(&s->reports->refused, 1);
            c4p_log(s, C4P_LOG_WARN, "c4p: the agent does not take reports; dropping them");
          }
        }
        free(payload);
      }
      if (rc == C4P_OK && s->reports != NULL) rc = c4p_reports_flush(s, s->fd);
      if (rc != C4P_OK) {
        if (!atomic_load(&s->stop))
          c4p_log(s, C4P_LOG_WARN, "c4p: lost the agent (%s); keeping every port",
                  c4p_strerror(rc));
        close(s->fd);
        s->fd = -1;
        if (s->reports != NULL) s->reports->sent_on_conn = 0;
        atomic_store(&s->connected, 0);
      }
    }
    notify(s, &changed);
    c4p_list_free(&changed);
  }
  return NULL;
}

/* -- the public calls ------------------------------------------------------------------------ */

void c4p_options_init(c4p_options *o) {
  if (o == NULL) return;
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->connect_timeout_ms = 5000;
  o->log_level = C4P_LOG_WARN;
}

static char *dup_or_null(const char *v) { return v == NULL ? NULL : strdup(v); }

c4p_result c4p_open(const c4p_options *o, c4p_session **out) {
  if (out == NULL) return C4P_EINVAL;
  *out = NULL;
  if (o == NULL || o->size < sizeof(c4p_options) || o->job_id == NULL || o->job_id[0] == '\0' ||
      strlen(o->job_id) > C4P_NAME_MAX ||
      (o->socket_path == NULL) == (o->bindings_file == NULL))
    return C4P_EINVAL;
  if (o->socket_path != NULL &&
      (o->token == NULL || strlen(o->socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)))
    return C4P_EINVAL;
  c4p_session *s = calloc(1, sizeof *s);
  if (s == NULL) return C4P_ENOMEM;
  pthread_rwlock_init(&s->lock, NULL);
  pthread_mutex_init(&s->cb_lock, NULL);
  s->fd = -1;
  s->wake[0] = s->wake[1] = -1;
  s->log = o->log;
  s->log_user = o->log_user;
  s->log_level = o->log_level;
  s->timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
  s->wire_version = o->wire_version > 0 ? o->wire_version : C4P_WIRE_VERSION;
  s->cb = o->replan;
  s->cb_user = o->replan_user;
  s->job_id = strdup(o->job_id);
  c4p_result rc = s->job_id ? C4P_OK : C4P_ENOMEM;
  if (rc == C4P_OK && o->bindings_file != NULL) {
    rc = c4p_open_static(s, o);
  } else if (rc == C4P_OK) {
    s->socket_path = dup_or_null(o->socket_path);
    s->token = dup_or_null(o->token);
    if (s->socket_path == NULL || s->token == NULL) rc = C4P_ENOMEM;
    if (rc == C4P_OK && pipe2(s->wake, O_CLOEXEC) != 0) rc = C4P_ENOMEM;
    if (rc == C4P_OK && (s->reports = calloc(1, sizeof *s->reports)) == NULL) rc = C4P_ENOMEM;
    if (rc == C4P_OK) rc = c4p_reports_init(s->reports);
    c4p_list first = {0};
    if (rc == C4P_OK) rc = agent_connect(s, &first);
    c4p_list_free(&first); /* nobody subscribed yet */
    if (rc == C4P_OK) {
      if (pthread_create(&s->thread, NULL, follow, s) != 0) rc = C4P_ENOMEM;
      else s->has_thread = 1;
    }
  }
  if (rc != C4P_OK) {
    c4p_close(s);
    return rc;
  }
  *out = s;
  return C4P_OK;
}

c4p_result c4p_lookup(c4p_session *s, const char *comm, uint32_t src, uint32_t dst,
                      uint32_t channel, uint32_t qp, c4p_binding *out) {
  if (s == NULL || comm == NULL || out == NULL) return C4P_EINVAL;
  pthread_rwlock_rdlock(&s->lock);
  c4p_slot *slot = c4p_table_find(&s->table, comm, src, dst, channel, qp);
  if (slot != NULL) *out = slot->b;
  pthread_rwlock_unlock(&s->lock);
  return slot != NULL ? C4P_OK : C4P_ENOTYET;
}

c4p_result c4p_subscribe(c4p_session *s, c4p_replan_fn fn, void *user) {
  if (s == NULL) return C4P_EINVAL;
  pthread_mutex_lock(&s->cb_lock);
  s->cb = fn;
  s->cb_user = user;
  pthread_mutex_unlock(&s->cb_lock);
  return C4P_OK;
}

c4p_result c4p_status(c4p_session *s, uint64_t *epoch, size_t *bindings, int *connected) {
  if (s == NULL) return C4P_EINVAL;
  pthread_rwlock_rdlock(&s->lock);
  if (epoch != NULL) *epoch = s->epoch;
  if (bindings != NULL) *bindings = s->table.count;
  pthread_rwlock_unlock(&s->lock);
  if (connected != NULL) *connected = atomic_load(&s->connected);
  return C4P_OK;
}

void c4p_close(c4p_session *s) {
  if (s == NULL) return;
  atomic_store(&s->stop, 1);
  if (s->has_thread) {
    ssize_t w;
    do w = write(s->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(s->thread, NULL);
  }
  /* A last drain: what the ranks reported just before closing still reaches the agent. */
  if (s->reports != NULL && s->fd >= 0) c4p_reports_flush(s, s->fd);
  if (s->fd >= 0) close(s->fd);
  for (int i = 0; i < 2; i++)
    if (s->wake[i] >= 0) close(s->wake[i]);
  c4p_table_free(&s->table);
  if (s->reports != NULL) {
    c4p_reports_free(s->reports);
    free(s->reports);
  }
  free(s->socket_path);
  free(s->job_id);
  if (s->token != NULL) {
    memset(s->token, 0, strlen(s->token));
    free(s->token);
  }
  pthread_rwlock_destroy(&s->lock);
  pthread_mutex_destroy(&s->cb_lock);
  free(s);
}
