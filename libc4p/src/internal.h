/* Internal declarations of libc4p (not installed, not exported). */
#ifndef C4P_INTERNAL_H
#define C4P_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "c4p.h"

#define C4P_HIDDEN __attribute__((visibility("hidden")))

/* -- the binding table: open addressing, linear probing, backward-shift deletion -------------- */
typedef struct c4p_slot {
  c4p_binding b;
  uint32_t hash;
  uint32_t gen; /* last full set that named it (to find what a full set dropped) */
  uint8_t used;
} c4p_slot;

typedef struct c4p_table {
  c4p_slot *slots;
  size_t cap; /* power of two, or 0 */
  size_t count;
} c4p_table;

C4P_HIDDEN void c4p_table_free(c4p_table *t);
C4P_HIDDEN c4p_slot *c4p_table_find(const c4p_table *t, const char *comm, uint32_t src, uint32_t dst,
                                   uint32_t ch, uint32_t qp);
/* Insert or replace; *changed set when the port/label is new or different. */
C4P_HIDDEN c4p_result c4p_table_put(c4p_table *t, const c4p_binding *b, uint32_t gen, int *changed);
C4P_HIDDEN int c4p_table_remove(c4p_table *t, const char *comm, uint32_t src, uint32_t dst, uint32_t ch,
                               uint32_t qp, c4p_binding *old);

/* -- a growable list of bindings (what to tell the callback) -------------------------------- */
typedef struct c4p_list {
  c4p_binding *items;
  size_t len, cap;
} c4p_list;
C4P_HIDDEN c4p_result c4p_list_push(c4p_list *l, const c4p_binding *b);
C4P_HIDDEN void c4p_list_free(c4p_list *l);

/* -- the wire (see docs/api.md, "The local binding API") ------------------------------------ */
#define C4P_WIRE_HEADER 12
#define C4P_WIRE_MAX_PAYLOAD (4u << 20)
enum {
  C4P_MSG_HELLO = 1,
  C4P_MSG_WELCOME = 2,
  C4P_MSG_BINDINGS = 3,
  C4P_MSG_ERROR = 4,
  C4P_MSG_REPORT = 5
};
#define C4P_REPORT_MAX_PAYLOAD (256u << 10) /* a REPORT frame's payload */
enum { C4P_KIND_FULL = 1, C4P_KIND_DELTA = 2 };

typedef struct c4p_header {
  uint16_t version, type;
  uint32_t length;
} c4p_header;

typedef struct c4p_reader {
  const uint8_t *p;
  size_t n, at;
  int bad;
} c4p_reader;

C4P_HIDDEN c4p_result c4p_parse_header(const uint8_t raw[C4P_WIRE_HEADER], c4p_header *h);
C4P_HIDDEN uint8_t c4p_rd_u8(c4p_reader *r);
C4P_HIDDEN uint16_t c4p_rd_u16(c4p_reader *r);
C4P_HIDDEN uint32_t c4p_rd_u32(c4p_reader *r);
C4P_HIDDEN uint64_t c4p_rd_u64(c4p_reader *r);
/* A length-prefixed string into buf (NUL-terminated); marks the reader bad if over limit. */
C4P_HIDDEN void c4p_rd_str(c4p_reader *r, char *buf, size_t limit);
/* HELLO frame into a malloc'd buffer. */
C4P_HIDDEN c4p_result c4p_encode_hello(int version, const char *job, const char *token, uint8_t **out,
                                      size_t *len);
C4P_HIDDEN uint8_t *c4p_put_u16(uint8_t *p, uint16_t v);
C4P_HIDDEN uint8_t *c4p_put_u32(uint8_t *p, uint32_t v);
C4P_HIDDEN uint8_t *c4p_put_u64(uint8_t *p, uint64_t v);
C4P_HIDDEN uint8_t *c4p_put_header(uint8_t *p, int version, uint16_t type, uint32_t length);

/* -- reports (report.c): a bounded multi-producer, single-consumer ring ----------------------
 * Each slot carries a sequence number: a producer may fill slot i of lap L only when its seq is
 * L*cap + i (the consumer freed it), and publishes it with seq + 1; the consumer takes it only
 * then, and frees it for the next lap. Producers claim positions with one CAS on `tail`. */
enum { C4P_REC_TRANSFER = 1, C4P_REC_ARRIVE = 2, C4P_REC_COMPLETE = 3 };
#define C4P_REPORT_COLLS 64 /* distinct collective names per session */

typedef struct c4p_rec {
  _Atomic uint64_t seq;
  uint32_t kind, comm;
  uint32_t a, b, c, d; /* transfer: src, dst, channel, qp; arrive: rank, collective; complete: rank */
  uint64_t step, bytes, t0, t1;
} c4p_rec;

typedef struct c4p_reports {
  c4p_rec *ring; /* C4P_REPORT_RING slots */
  _Atomic uint64_t tail; /* next position a producer claims (= samples taken) */
  uint64_t head;         /* next position the consumer reads (the session's thread only) */
  _Atomic uint64_t sent, dropped;
  _Atomic uint64_t drained; /* the consumer's position once the frame holding it went out */
  int sent_on_conn;         /* a REPORT went out on the current connection */
  pthread_mutex_t names_lock; /* registration of communicators and collectives */
  char **comms;
  _Atomic uint32_t ncomms;
  char colls[C4P_REPORT_COLLS][C4P_COLLECTIVE_MAX + 1];
  _Atomic uint32_t ncolls;
  uint8_t *frame;       /* header + C4P_REPORT_MAX_PAYLOAD */
  uint8_t *used;        /* per communicator: referenced by the frame being built */
  c4p_rec *batch;       /* the records of the frame being built */
  atomic_int refused;   /* the agent does not take reports: drain and count them as dropped */
} c4p_reports;

C4P_HIDDEN c4p_result c4p_reports_init(c4p_reports *r);
C4P_HIDDEN void c4p_reports_free(c4p_reports *r);
/* Drain the ring into REPORT frames sent on fd (the session's thread); C4P_ECONNECT if a send
 * failed (the frame's samples are counted as dropped). */
C4P_HIDDEN c4p_result c4p_reports_flush(c4p_session *s, int fd);

/* -- the session ----------------------------------------------------------------------------- */
struct c4p_session {
  pthread_rwlock_t lock; /* table, epoch */
  c4p_table table;
  uint64_t epoch;
  uint32_t gen;
  atomic_int connected;
  int is_static;

  pthread_mutex_t cb_lock; /* held while callbacks run: subscribe(NULL) waits for them */
  c4p_replan_fn cb;
  void *cb_user;

  char *socket_path, *job_id, *token;
  int timeout_ms, wire_version;
  c4p_log_fn log;
  void *log_user;
  int log_level;

  int fd;
  int wake[2];
  pthread_t thread;
  int has_thread;
  atomic_int stop;

  c4p_reports *reports; /* agent mode only */
};

C4P_HIDDEN void c4p_log(c4p_session *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
C4P_HIDDEN c4p_result c4p_send_all(int fd, const uint8_t *buf, size_t len);
C4P_HIDDEN c4p_result c4p_open_static(c4p_session *s, const c4p_options *o);

#endif
