/* Reports: what the collective library measured, on its way to the host agent.
 *
 * Why a ring of fixed slots claimed with one CAS: the report calls run on the collective's hot
 * path (NCCL's proxy thread reports every network step), from several threads at once (the
 * application's thread for collective calls, one proxy thread per communicator), so they may
 * neither take a lock that the session's thread holds while it talks to the agent, nor
 * allocate, nor make a system call. Each slot carries a sequence number (the bounded MPMC
 * queue design, used here with one consumer): a producer claims a position with a CAS on the
 * tail, fills the slot and publishes it with a release store; a full ring costs one failed
 * comparison and a counter. The session's thread, which already owns the agent's socket, drains
 * the ring every C4P_REPORT_FLUSH_MS into REPORT frames (docs/api.md, "Reports"). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define RING_MASK ((uint64_t)C4P_REPORT_RING - 1)
#define BATCH 4096 /* records per frame at most (also bounded by the frame's bytes) */
#define TRANSFER_BYTES 52u
#define ARRIVE_BYTES 36u
#define COMPLETE_BYTES 24u
/* dropped u64, ncomm u16, ncoll u16 + every collective name, three counts u32 */
#define FIXED_BYTES (8u + 2u + 2u + C4P_REPORT_COLLS * (2u + C4P_COLLECTIVE_MAX) + 12u)

_Static_assert((C4P_REPORT_RING & (C4P_REPORT_RING - 1)) == 0, "the ring is a power of two");
_Static_assert(sizeof(c4p_rec) == 64, "one slot is one cache line");

c4p_result c4p_reports_init(c4p_reports *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->names_lock, NULL);
  r->ring = aligned_alloc(64, sizeof(c4p_rec) * C4P_REPORT_RING);
  r->comms = calloc(C4P_REPORT_COMMS, sizeof(char *));
  r->frame = malloc(C4P_WIRE_HEADER + C4P_REPORT_MAX_PAYLOAD);
  r->used = calloc(C4P_REPORT_COMMS, 1);
  r->batch = malloc(sizeof(c4p_rec) * BATCH);
  if (r->ring == NULL || r->comms == NULL || r->frame == NULL || r->used == NULL ||
      r->batch == NULL)
    return C4P_ENOMEM;
  for (uint64_t i = 0; i < C4P_REPORT_RING; i++) atomic_init(&r->ring[i].seq, i);
  /* Collective 0 is the empty name (a NULL or unregistrable collective). */
  atomic_store(&r->ncolls, 1);
  return C4P_OK;
}

void c4p_reports_free(c4p_reports *r) {
  if (r == NULL) return;
  if (r->comms != NULL)
    for (uint32_t i = 0; i < atomic_load(&r->ncomms); i++) free(r->comms[i]);
  free(r->comms);
  free(r->ring);
  free(r->frame);
  free(r->used);
  free(r->batch);
  pthread_mutex_destroy(&r->names_lock);
}

uint64_t c4p_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* -- registration (not on the hot path) ------------------------------------------------------ */

c4p_result c4p_report_comm(c4p_session *s, const char *name, uint32_t *id) {
  if (s == NULL || name == NULL || id == NULL || name[0] == '\0' || strlen(name) > C4P_NAME_MAX)
    return C4P_EINVAL;
  if (s->reports == NULL) return C4P_ENOTSUP;
  c4p_reports *r = s->reports;
  c4p_result rc = C4P_OK;
  pthread_mutex_lock(&r->names_lock);
  uint32_t n = atomic_load(&r->ncomms), i = 0;
  while (i < n && strcmp(r->comms[i], name) != 0) i++;
  if (i == n) {
    if (n >= C4P_REPORT_COMMS) {
      rc = C4P_EINVAL;
    } else if ((r->comms[n] = strdup(name)) == NULL) {
      rc = C4P_ENOMEM;
    } else {
      atomic_store_explicit(&r->ncomms, n + 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&r->names_lock);
  if (rc == C4P_OK) *id = i;
  return rc;
}

/* The id of a collective's name: a lock-free scan of the few names seen so far, and a
 * registration under the lock the first time (a fixed table: no allocation). */
static uint32_t collective_id(c4p_reports *r, const char *name) {
  if (name == NULL || name[0] == '\0') return 0;
  char key[C4P_COLLECTIVE_MAX + 1];
  size_t len = strnlen(name, C4P_COLLECTIVE_MAX);
  memcpy(key, name, len);
  key[len] = '\0';
  uint32_t n = atomic_load_explicit(&r->ncolls, memory_order_acquire);
  for (uint32_t i = 1; i < n; i++)
    if (strcmp(r->colls[i], key) == 0) return i;
  uint32_t id = 0;
  pthread_mutex_lock(&r->names_lock);
  n = atomic_load(&r->ncolls);
  for (uint32_t i = 1; i < n && id == 0; i++)
    if (strcmp(r->colls[i], key) == 0) id = i;
  if (id == 0 && n < C4P_REPORT_COLLS) {
    memcpy(r->colls[n], key, len + 1);
    atomic_store_explicit(&r->ncolls, n + 1, memory_order_release);
    id = n;
  }
  pthread_mutex_unlock(&r->names_lock);
  return id;
}

/* -- the hot path ---------------------------------------------------------------------------- */

static c4p_result put(c4p_reports *r, uint32_t kind, uint32_t comm, uint32_t a, uint32_t b,
                      uint32_t c, uint32_t d, uint64_t step, uint64_t bytes, uint64_t t0,
                      uint64_t t1) {
  uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
  for (;;) {
    c4p_rec *slot = &r->ring[pos & RING_MASK];
    uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
    int64_t lag = (int64_t)(seq - pos);
    if (lag == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        slot->kind = kind;
        slot->comm = comm;
        slot->a = a;
        slot->b = b;
        slot->c = c;
        slot->d = d;
        slot->step = step;
        slot->bytes = bytes;
        slot->t0 = t0;
        slot->t1 = t1;
        atomic_store_explicit(&slot->seq, pos + 1, memory_order_release);
        return C4P_OK;
      }
      /* another producer took pos: the failed CAS loaded the new tail into pos */
    } else if (lag < 0) {
      atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
      return C4P_EDROPPED; /* the slot of the previous lap is not drained yet: full */
    } else {
      pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    }
  }
}

static c4p_result check(c4p_session *s, uint32_t comm) {
  if (s == NULL) return C4P_EINVAL;
  if (s->reports == NULL) return C4P_ENOTSUP;
  if (comm >= atomic_load_explicit(&s->reports->ncomms, memory_order_acquire)) return C4P_EINVAL;
  return C4P_OK;
}

c4p_result c4p_report_transfer(c4p_session *s, uint32_t comm, uint32_t src, uint32_t dst,
                               uint32_t channel, uint32_t qp, uint64_t step, uint64_t bytes,
                               uint64_t start_ns, uint64_t end_ns) {
  c4p_result rc = check(s, comm);
  if (rc != C4P_OK) return rc;
  if (end_ns < start_ns) return C4P_EINVAL;
  return put(s->reports, C4P_REC_TRANSFER, comm, src, dst, channel, qp, step, bytes, start_ns,
             end_ns);
}

c4p_result c4p_report_arrive(c4p_session *s, uint32_t comm, uint32_t rank, uint64_t step,
                             const char *collective, uint64_t bytes, uint64_t t_ns) {
  c4p_result rc = check(s, comm);
  if (rc != C4P_OK) return rc;
  return put(s->reports, C4P_REC_ARRIVE, comm, rank, collective_id(s->reports, collective), 0,
             0, step, bytes, t_ns, 0);
}

c4p_result c4p_report_complete(c4p_session *s, uint32_t comm, uint32_t rank, uint64_t step,
                               uint64_t t_ns) {
  c4p_result rc = check(s, comm);
  if (rc != C4P_OK) return rc;
  return put(s->reports, C4P_REC_COMPLETE, comm, rank, 0, 0, 0, step, 0, t_ns, 0);
}

c4p_result c4p_report_stats(c4p_session *s, uint64_t *taken, uint64_t *sent, uint64_t *dropped) {
  if (s == NULL) return C4P_EINVAL;
  if (s->reports == NULL) return C4P_ENOTSUP;
  if (taken != NULL) *taken = atomic_load(&s->reports->tail);
  if (sent != NULL) *sent = atomic_load(&s->reports->sent);
  if (dropped != NULL) *dropped = atomic_load(&s->reports->dropped);
  return C4P_OK;
}

c4p_result c4p_report_flush(c4p_session *s, int timeout_ms) {
  if (s == NULL) return C4P_EINVAL;
  if (s->reports == NULL) return C4P_ENOTSUP;
  uint64_t want = atomic_load(&s->reports->tail);
  for (int waited = 0;; waited++) {
    if (atomic_load(&s->reports->drained) >= want) return C4P_OK;
    if (waited >= timeout_ms) return C4P_ETIMEOUT;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
}

/* -- the session's thread: draining into frames ---------------------------------------------- */

static size_t record_bytes(uint32_t kind) {
  return kind == C4P_REC_TRANSFER ? TRANSFER_BYTES
         : kind == C4P_REC_ARRIVE ? ARRIVE_BYTES
                                  : COMPLETE_BYTES;
}

/* Take records off the ring into r->batch while the frame stays within its limit. */
static size_t take_batch(c4p_reports *r) {
  size_t n = 0, size = FIXED_BYTES;
  memset(r->used, 0, C4P_REPORT_COMMS);
  while (n < BATCH) {
    c4p_rec *slot = &r->ring[r->head & RING_MASK];
    if (atomic_load_explicit(&slot->seq, memory_order_acquire) != r->head + 1) break;
    uint32_t comm = slot->comm;
    size_t need = record_bytes(slot->kind);
    if (!r->used[comm]) need += 4 + 2 + strlen(r->comms[comm]);
    if (size + need > C4P_REPORT_MAX_PAYLOAD) break;
    size += need;
    r->used[comm] = 1;
    r->batch[n] = *slot; /* the seq copied with it is not used */
    atomic_store_explicit(&slot->seq, r->head + C4P_REPORT_RING, memory_order_release);
    r->head++;
    n++;
  }
  return n;
}

static size_t encode_batch(c4p_reports *r, size_t n, int version) {
  uint8_t *p = r->frame + C4P_WIRE_HEADER;
  p = c4p_put_u64(p, atomic_load(&r->dropped));
  uint32_t ncomms = atomic_load_explicit(&r->ncomms, memory_order_acquire), used = 0;
  for (uint32_t i = 0; i < ncomms; i++) used += r->used[i];
  p = c4p_put_u16(p, (uint16_t)used);
  for (uint32_t i = 0; i < ncomms; i++) {
    if (!r->used[i]) continue;
    size_t len = strlen(r->comms[i]);
    p = c4p_put_u16(c4p_put_u32(p, i), (uint16_t)len);
    memcpy(p, r->comms[i], len);
    p += len;
  }
  uint32_t ncolls = atomic_load_explicit(&r->ncolls, memory_order_acquire);
  p = c4p_put_u16(p, (uint16_t)ncolls);
  for (uint32_t i = 0; i < ncolls; i++) {
    size_t len = strlen(r->colls[i]);
    p = c4p_put_u16(p, (uint16_t)len);
    memcpy(p, r->colls[i], len);
    p += len;
  }
  for (uint32_t kind = C4P_REC_TRANSFER; kind <= C4P_REC_COMPLETE; kind++) {
    uint32_t count = 0;
    for (size_t i = 0; i < n; i++) count += r->batch[i].kind == kind;
    p = c4p_put_u32(p, count);
    for (size_t i = 0; i < n; i++) {
      const c4p_rec *x = &r->batch[i];
      if (x->kind != kind) continue;
      p = c4p_put_u32(c4p_put_u32(p, x->comm), x->a);
      if (kind == C4P_REC_TRANSFER) {
        p = c4p_put_u32(c4p_put_u32(c4p_put_u32(p, x->b), x->c), x->d);
        p = c4p_put_u64(c4p_put_u64(c4p_put_u64(c4p_put_u64(p, x->step), x->bytes), x->t0),
                        x->t1);
      } else if (kind == C4P_REC_ARRIVE) {
        p = c4p_put_u64(c4p_put_u64(c4p_put_u32(c4p_put_u64(p, x->step), x->b), x->bytes),
                        x->t0);
      } else {
        p = c4p_put_u64(c4p_put_u64(p, x->step), x->t0);
      }
    }
  }
  size_t payload = (size_t)(p - r->frame) - C4P_WIRE_HEADER;
  c4p_put_header(r->frame, version, C4P_MSG_REPORT, (uint32_t)payload);
  return C4P_WIRE_HEADER + payload;
}

c4p_result c4p_reports_flush(c4p_session *s, int fd) {
  c4p_reports *r = s->reports;
  for (int frames = 0; frames < 16; frames++) { /* bounded: ~64k samples per tick */
    size_t n = take_batch(r);
    if (n == 0) return C4P_OK;
    if (atomic_load(&r->refused)) {
      atomic_fetch_add(&r->dropped, n);
      atomic_store(&r->drained, r->head);
      continue;
    }
    size_t len = encode_batch(r, n, s->wire_version);
    c4p_result rc = c4p_send_all(fd, r->frame, len);
    if (rc != C4P_OK) {
      atomic_fetch_add(&r->dropped, n);
      atomic_store(&r->drained, r->head);
      return rc;
    }
    r->sent_on_conn = 1;
    atomic_fetch_add(&r->sent, n);
    atomic_store(&r->drained, r->head);
  }
  return C4P_OK;
}
