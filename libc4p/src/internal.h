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
enum { C4P_MSG_HELLO = 1, C4P_MSG_WELCOME = 2, C4P_MSG_BINDINGS = 3, C4P_MSG_ERROR = 4 };
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
};

C4P_HIDDEN void c4p_log(c4p_session *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
C4P_HIDDEN c4p_result c4p_open_static(c4p_session *s, const c4p_options *o);

#endif
