/* libnccl-profiler-c4p.so: NCCL's profiler events as libc4p reports (docs/nccl.md).
 *
 * What is mapped (per communicator, i.e. per init context):
 *  - a collective (Coll event, sequence number s) whose GPU work reaches the network: the rank
 *    *arrives* when the first of its proxy operations is in progress (the GPU kernel got there;
 *    the host's enqueue time says nothing of the GPU), and *completes* when the last of its
 *    proxy operations stops -> c4p_report_arrive / c4p_report_complete with step = s;
 *  - a proxy step of a send operation: from the moment its data is handed to the network
 *    (SendWait, with its size) to its stop -> c4p_report_transfer on the connection
 *    (communicator, rank -> peer, channel, QP 0), step = s. Receives are not reported: the
 *    sender reports each connection once. NCCL keeps several steps of an operation in flight,
 *    so steps whose intervals overlap are merged into one transfer (their bytes summed, the
 *    union of their intervals kept exactly): a busy connection costs one report per run of
 *    back-to-back steps (at most 10 ms long, so a long run still shows progress) instead of
 *    one per step.
 * Calls that never touch the network on this rank (NVLink/SHM only) are not reported.
 *
 * Never in NCCL's way: every event object comes from pools allocated at init (a full pool
 * leaves the event untracked and counted), the report calls never block, and every entry point
 * returns success whatever happens (init too: without an agent the plugin activates no event).
 *
 * Configuration, from the environment: C4P_JOB (required), C4P_TOKEN or C4P_TOKEN_FILE, and
 * C4P_SOCKET (default /run/c4p/agent.sock). The communicator is named by NCCL's commName (set
 * it to the communicator id registered with the job) or, without one, by the 16-hex-digit
 * commHash. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c4p.h"
#include "nccl_profiler_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define COLLS 1024
#define OPS 4096
#define STEPS 16384
#define RUN_MAX_NS 10000000ull /* a run of merged steps is reported at least every 10 ms */

enum { OBJ_COLL = 0xC1, OBJ_OP = 0xC2, OBJ_STEP = 0xC3 };

typedef struct ctx ctx;

typedef struct coll_ev {
  uint8_t kind;
  ctx *c;
  atomic_int refs; /* NCCL's own (until its stopEvent) + one per proxy operation */
  atomic_int arrived, completed;
  int rank;
  uint64_t seq, bytes;
  char func[C4P_COLLECTIVE_MAX + 1];
} coll_ev;

typedef struct op_ev {
  uint8_t kind;
  ctx *c;
  coll_ev *coll; /* NULL: not ours to follow (another process's, under PXN) */
  uint64_t seq;
  int rank, peer, channel, is_send;
  uint64_t run_start, run_end, run_bytes; /* overlapping steps merged (the proxy thread's) */
  uint64_t reported_end; /* end of the last run reported: later runs start no earlier */
  int run_open;
} op_ev;

typedef struct step_ev {
  uint8_t kind;
  op_ev *op;
  uint64_t start_ns, bytes;
} step_ev;

/* A stack of free objects; a tiny spin lock (two threads at most contend: the application's
 * and the proxy's), held for one pointer move. */
typedef struct pool {
  atomic_flag lock;
  void **free;
  size_t n;
  unsigned char *mem;
} pool;

/* Collectives live in a ring, not a pool: NCCL may stop a collective (its enqueue is done)
 * before the proxy thread starts its operations, which then still name it as their parent, so
 * a collective's object must outlive its reference count reaching zero. A slot is reused
 * COLLS collectives later, long after its operations ended. */
struct ctx {
  uint32_t comm;
  coll_ev *colls;
  atomic_uint next;
  pool ops, steps;
  atomic_ulong untracked;
  c4p_nccl_logger log;
  char name[C4P_NAME_MAX + 1];
};

static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;
static c4p_session *session; /* one per process, shared by its communicators */
static int users;
static pid_t self;

static int pool_init(pool *p, size_t count, size_t size) {
  atomic_flag_clear(&p->lock);
  p->mem = calloc(count, size);
  p->free = malloc(count * sizeof(void *));
  if (p->mem == NULL || p->free == NULL) return -1;
  for (size_t i = 0; i < count; i++) p->free[i] = p->mem + i * size;
  p->n = count;
  return 0;
}

static void pool_free(pool *p) {
  free(p->mem);
  free(p->free);
}

static void *pop(pool *p) {
  while (atomic_flag_test_and_set_explicit(&p->lock, memory_order_acquire)) {
  }
  void *x = p->n > 0 ? p->free[--p->n] : NULL;
  atomic_flag_clear_explicit(&p->lock, memory_order_release);
  return x;
}

static void push(pool *p, void *x) {
  while (atomic_flag_test_and_set_explicit(&p->lock, memory_order_acquire)) {
  }
  p->free[p->n++] = x;
  atomic_flag_clear_explicit(&p->lock, memory_order_release);
}

static uint64_t type_size(const char *t) {
  static const struct {
    const char *name;
    uint64_t size;
  } sizes[] = {{"ncclInt8", 1},     {"ncclUint8", 1},    {"ncclFloat8e4m3", 1},
               {"ncclFloat8e5m2", 1}, {"ncclFloat16", 2}, {"ncclBfloat16", 2},
               {"ncclInt32", 4},    {"ncclUint32", 4},   {"ncclFloat32", 4},
               {"ncclInt64", 8},    {"ncclUint64", 8},   {"ncclFloat64", 8}};
  if (t == NULL) return 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (strcmp(t, sizes[i].name) == 0) return sizes[i].size;
  return 0;
}

/* -- init / finalize (not on the hot path) --------------------------------------------------- */

static void say(c4p_nccl_logger log, int level, const char *what) {
  if (log != NULL) log(level, C4P_NCCL_SUBSYS_INIT, __FILE__, __LINE__, "c4p profiler: %s", what);
}

static void on_log(void *user, int level, const char *message) {
  say((c4p_nccl_logger)user, level <= C4P_LOG_WARN ? C4P_NCCL_LOG_WARN : C4P_NCCL_LOG_INFO,
      message);
}

static c4p_session *open_session(c4p_nccl_logger log) {
  const char *job = getenv("C4P_JOB"), *token = getenv("C4P_TOKEN");
  const char *token_file = getenv("C4P_TOKEN_FILE"), *sock = getenv("C4P_SOCKET");
  char buf[600];
  if (job == NULL || job[0] == '\0') {
    say(log, C4P_NCCL_LOG_WARN, "C4P_JOB is not set: not reporting");
    return NULL;
  }
  if (token == NULL && token_file != NULL) {
    FILE *f = fopen(token_file, "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f != NULL) fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) n--;
    buf[n] = '\0';
    token = buf;
  }
  c4p_options o;
  c4p_options_init(&o);
  o.socket_path = sock != NULL && sock[0] != '\0' ? sock : "/run/c4p/agent.sock";
  o.job_id = job;
  o.token = token != NULL ? token : "";
  o.log = on_log;
  o.log_user = (void *)log;
  c4p_session *s = NULL;
  c4p_result rc = c4p_open(&o, &s);
  memset(buf, 0, sizeof buf);
  if (rc != C4P_OK) {
    char what[256];
    snprintf(what, sizeof what, "no session with the agent at %s (%s): not reporting",
             o.socket_path, c4p_strerror(rc));
    say(log, C4P_NCCL_LOG_WARN, what);
    return NULL;
  }
  return s;
}

static c4p_nccl_result init(void **context, int *mask, const char *comm_name, uint64_t hash,
                            c4p_nccl_logger log) {
  *context = NULL;
  *mask = 0;
  pthread_mutex_lock(&session_lock);
  if (session == NULL) {
    self = getpid();
    session = open_session(log);
  }
  if (session == NULL) {
    pthread_mutex_unlock(&session_lock);
    return C4P_NCCL_SUCCESS; /* NCCL runs on, unobserved */
  }
  ctx *c = calloc(1, sizeof *c);
  int ok = c != NULL && (c->colls = calloc(COLLS, sizeof(coll_ev))) != NULL &&
           pool_init(&c->ops, OPS, sizeof(op_ev)) == 0 &&
           pool_init(&c->steps, STEPS, sizeof(step_ev)) == 0;
  if (ok) {
    if (comm_name != NULL && comm_name[0] != '\0')
      snprintf(c->name, sizeof c->name, "%s", comm_name);
    else
      snprintf(c->name, sizeof c->name, "%016llx", (unsigned long long)hash);
    ok = c4p_report_comm(session, c->name, &c->comm) == C4P_OK;
  }
  if (!ok) {
    if (c != NULL) {
      free(c->colls);
      pool_free(&c->ops);
      pool_free(&c->steps);
      free(c);
    }
    if (users == 0) {
      c4p_close(session);
      session = NULL;
    }
    pthread_mutex_unlock(&session_lock);
    say(log, C4P_NCCL_LOG_WARN, "cannot set up a communicator: not reporting it");
    return C4P_NCCL_SUCCESS;
  }
  users++;
  pthread_mutex_unlock(&session_lock);
  c->log = log;
  *context = c;
  *mask = C4P_NCCL_EV_COLL | C4P_NCCL_EV_PROXY_OP | C4P_NCCL_EV_PROXY_STEP;
  return C4P_NCCL_SUCCESS;
}

static c4p_nccl_result init_v4(void **context, int *mask, const char *comm_name, uint64_t hash,
                               int nodes, int nranks, int rank, c4p_nccl_logger log) {
  (void)nodes, (void)nranks, (void)rank;
  return init(context, mask, comm_name, hash, log);
}

static c4p_nccl_result init_v5(void **context, uint64_t comm_id, int *mask,
                               const char *comm_name, int nodes, int nranks, int rank,
                               c4p_nccl_logger log) {
  (void)nodes, (void)nranks, (void)rank;
  return init(context, mask, comm_name, comm_id, log);
}

static c4p_nccl_result finalize(void *context) {
  ctx *c = context;
  if (c == NULL) return C4P_NCCL_SUCCESS;
  unsigned long lost = atomic_load(&c->untracked);
  if (lost > 0) {
    char what[200];
    snprintf(what, sizeof what, "communicator %s: %lu events untracked (pools full)", c->name,
             lost);
    say(c->log, C4P_NCCL_LOG_WARN, what);
  }
  pthread_mutex_lock(&session_lock);
  if (--users == 0) {
    c4p_report_flush(session, 2000); /* what the last calls reported still gets out */
    c4p_close(session);
    session = NULL;
  }
  pthread_mutex_unlock(&session_lock);
  free(c->colls);
  pool_free(&c->ops);
  pool_free(&c->steps);
  free(c);
  return C4P_NCCL_SUCCESS;
}

/* -- events (the hot path) ------------------------------------------------------------------- */

static void arrive(coll_ev *e, uint64_t now) {
  int no = 0;
  if (atomic_load_explicit(&e->arrived, memory_order_relaxed) == 0 &&
      atomic_compare_exchange_strong(&e->arrived, &no, 1))
    c4p_report_arrive(session, e->c->comm, (uint32_t)e->rank, e->seq, e->func, e->bytes, now);
}

/* The last reference gone after the rank arrived: its network work is over (once). */
static void release(coll_ev *e) {
  int no = 0;
  if (atomic_fetch_sub(&e->refs, 1) == 1 && atomic_load(&e->arrived) &&
      atomic_compare_exchange_strong(&e->completed, &no, 1))
    c4p_report_complete(session, e->c->comm, (uint32_t)e->rank, e->seq, c4p_now_ns());
}

static c4p_nccl_result start(ctx *c, void **handle, uint64_t type, void *parent, int rank,
                             const c4p_nccl_coll *coll, const c4p_nccl_proxy_op *op) {
  *handle = NULL;
  if (c == NULL) return C4P_NCCL_SUCCESS;
  if (type == C4P_NCCL_EV_COLL) {
    coll_ev *e = &c->colls[atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed) % COLLS];
    e->kind = OBJ_COLL;
    e->c = c;
    atomic_store(&e->refs, 1);
    atomic_store(&e->arrived, 0);
    atomic_store(&e->completed, 0);
    e->rank = rank;
    e->seq = coll->seqNumber;
    e->bytes = (uint64_t)coll->count * type_size(coll->datatype);
    snprintf(e->func, sizeof e->func, "%s", coll->func != NULL ? coll->func : "");
    *handle = e;
  } else if (type == C4P_NCCL_EV_PROXY_OP) {
    op_ev *e = pop(&c->ops);
    if (e == NULL) goto untracked;
    e->kind = OBJ_OP;
    e->c = c;
    coll_ev *owner = parent;
    e->coll = op->pid == self && owner != NULL && owner->kind == OBJ_COLL ? owner : NULL;
    if (e->coll != NULL) atomic_fetch_add(&e->coll->refs, 1);
    e->seq = e->coll != NULL ? e->coll->seq : C4P_STEP_UNKNOWN;
    e->rank = rank;
    e->peer = op->peer;
    e->channel = op->channelId;
    e->is_send = op->isSend;
    e->run_start = e->run_end = e->run_bytes = 0;
    e->run_open = 0;
    *handle = e;
  } else if (type == C4P_NCCL_EV_PROXY_STEP) {
    op_ev *owner = parent;
    if (owner == NULL || owner->kind != OBJ_OP) return C4P_NCCL_SUCCESS;
    step_ev *e = pop(&c->steps);
    if (e == NULL) goto untracked;
    e->kind = OBJ_STEP;
    e->op = owner;
    e->start_ns = 0;
    e->bytes = 0;
    *handle = e;
  }
  return C4P_NCCL_SUCCESS;
untracked:
  atomic_fetch_add_explicit(&c->untracked, 1, memory_order_relaxed);
  return C4P_NCCL_SUCCESS;
}

static c4p_nccl_result start_v4(void *context, void **handle, c4p_nccl_descr_v4 *d) {
  return start(context, handle, d->type, d->parentObj, d->rank, &d->coll, &d->proxyOp);
}

static c4p_nccl_result start_v5(void *context, void **handle, c4p_nccl_descr_v5 *d) {
  return start(context, handle, d->type, d->parentObj, d->rank, &d->coll, &d->proxyOp);
}

/* Report the operation's current run of merged steps, if any. */
static void flush_run(op_ev *op) {
  if (!op->run_open) return;
  c4p_report_transfer(session, op->c->comm, (uint32_t)op->rank, (uint32_t)op->peer,
                      (uint32_t)op->channel, 0, op->seq, op->run_bytes, op->run_start,
                      op->run_end);
  op->reported_end = op->run_end;
  op->run_open = 0;
}

static c4p_nccl_result stop(void *handle) {
  if (handle == NULL) return C4P_NCCL_SUCCESS;
  uint8_t kind = *(uint8_t *)handle;
  if (kind == OBJ_COLL) {
    release(handle); /* NCCL is done with it; its proxy operations may still run */
  } else if (kind == OBJ_OP) {
    op_ev *e = handle;
    flush_run(e); /* before the completion below: the transfers precede it */
    if (e->coll != NULL) release(e->coll);
    push(&e->c->ops, e);
  } else if (kind == OBJ_STEP) {
    step_ev *e = handle;
    op_ev *op = e->op;
    if (op->is_send && e->start_ns != 0) {
      uint64_t end = c4p_now_ns();
      if (op->run_open && e->start_ns <= op->run_end) { /* overlaps the run: extend it */
        if (e->start_ns < op->run_start) op->run_start = e->start_ns;
        if (end > op->run_end) op->run_end = end;
        op->run_bytes += e->bytes;
        if (op->run_end - op->run_start >= RUN_MAX_NS) flush_run(op); /* keep reports timely */
      } else {
        flush_run(op);
        /* A step that began inside a run already cut and reported (the 10 ms cut above) keeps
         * its bytes but starts where that report ended: busy time is never counted twice. */
        uint64_t start = e->start_ns > op->reported_end ? e->start_ns : op->reported_end;
        op->run_open = 1;
        op->run_start = start < end ? start : end;
        op->run_end = end;
        op->run_bytes = e->bytes;
      }
    }
    push(&op->c->steps, e);
  }
  return C4P_NCCL_SUCCESS;
}

static c4p_nccl_result record(void *handle, int state, c4p_nccl_state_args *args) {
  if (handle == NULL) return C4P_NCCL_SUCCESS;
  uint8_t kind = *(uint8_t *)handle;
  if (kind == OBJ_OP && state == C4P_NCCL_ST_OP_IN_PROGRESS) {
    op_ev *e = handle;
    if (e->coll != NULL) arrive(e->coll, c4p_now_ns());
  } else if (kind == OBJ_STEP) {
    step_ev *e = handle;
    if (e->op->coll != NULL) arrive(e->op->coll, c4p_now_ns()); /* if InProgress was missed */
    if (state == C4P_NCCL_ST_STEP_SEND_WAIT && e->start_ns == 0) {
      e->start_ns = c4p_now_ns();
      e->bytes = args != NULL ? args->proxyStep.transSize : 0;
    }
  }
  return C4P_NCCL_SUCCESS;
}

EXPORT const c4p_nccl_profiler_v5 ncclProfiler_v5 = {"c4p", init_v5, start_v5, stop, record,
                                                     finalize};
EXPORT const c4p_nccl_profiler_v4 ncclProfiler_v4 = {"c4p", init_v4, start_v4, stop, record,
                                                     finalize};
