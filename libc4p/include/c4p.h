/*
 * c4p.h -- libc4p: the UDP source port of every QP, as planned by the c4p controller.
 *
 * A collective library (a fork of NCCL's net_ib, RCCL, ...) links libc4p to learn, for each QP
 * it opens, the RoCEv2 UDP source port (and the GRH flow label that yields it) that puts the QP
 * on its planned path through the fabric. libc4p talks only to the host's c4p agent over a Unix
 * socket (or reads a per-host bindings file written by `c4p plan --bindings-dir`); it never
 * talks to the controller or the network, and needs nothing beyond libc (pthread, dl).
 *
 * Rules of the house:
 *  - every call returns a c4p_result (0 = C4P_OK); c4p_strerror() names it;
 *  - nothing is printed unless a log callback is set in c4p_options;
 *  - every call is thread-safe; lookups never block on the agent or the network:
 *    a QP whose binding is not known (yet) gives C4P_ENOTYET at once -- connect with flow
 *    label 0 (the kernel's default port) and move the QP when the re-plan callback says so;
 *  - ports outlive the agent and the controller (fail-static): a session keeps what it got and
 *    reconnects to the agent in its own thread.
 *
 * ABI: only the symbols declared here are exported (C4P_API); libc4p.so.1 is the SONAME, bumped
 * on any incompatible change. c4p_options starts with its own size so it can grow.
 */
#ifndef C4P_H
#define C4P_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define C4P_API __attribute__((visibility("default")))
#else
#define C4P_API
#endif

#define C4P_VERSION_MAJOR 1
#define C4P_VERSION_MINOR 0
#define C4P_VERSION_PATCH 0
#define C4P_VERSION ((C4P_VERSION_MAJOR << 16) | (C4P_VERSION_MINOR << 8) | C4P_VERSION_PATCH)
#define C4P_WIRE_VERSION 1 /* the agent protocol this header's library speaks */
#define C4P_NAME_MAX 128   /* bytes of a job or communicator id */

/* Results. The numbers are part of the ABI (and of the agent's wire format). */
typedef enum c4p_result {
  C4P_OK = 0,
  C4P_ENOTYET = 1,    /* no binding for this QP (yet): use flow label 0 for now */
  C4P_EINVAL = 2,     /* a bad argument */
  C4P_ENOMEM = 3,     /* out of memory */
  C4P_ECONNECT = 4,   /* the agent's socket cannot be reached (absent, or no permission) */
  C4P_EAUTH = 5,      /* the job token was refused */
  C4P_EPERM = 6,      /* the agent refused this process's uid/gid (SO_PEERCRED policy) */
  C4P_EPROTO = 7,     /* a malformed or truncated message */
  C4P_EVERSION = 8,   /* the library and the agent speak different wire versions */
  C4P_EUNAVAIL = 9,   /* the agent cannot check the token now (controller unreachable) */
  C4P_EMISMATCH = 10, /* a bindings file for another job, fabric or host */
  C4P_EFILE = 11,     /* a bindings file that cannot be read or parsed */
  C4P_ENOTSUP = 12,   /* not supported here (e.g. live port change without mlx5) */
  C4P_ETIMEOUT = 13,  /* the agent did not answer within connect_timeout_ms */
  C4P_EPEER = 14,     /* the socket is served by a process of an unexpected user */
  C4P_EINTERNAL = 15, /* a bug, or an error the agent could not classify */
  C4P_EAPPLY = 16,    /* the verbs provider refused the change (see the log for errno) */
  C4P_EDROPPED = 17   /* a report found the ring full: the sample was dropped (and counted) */
} c4p_result;

/* Log levels for the optional log callback. */
enum { C4P_LOG_ERROR = 0, C4P_LOG_WARN = 1, C4P_LOG_INFO = 2, C4P_LOG_DEBUG = 3 };
typedef void (*c4p_log_fn)(void *user, int level, const char *message);

/* One QP's binding. A QP is named as NCCL's net_ib knows it at connect time: communicator id
 * (the one the launcher submitted), source and destination rank, channel (for trees:
 * tree * channels + channel) and the QP's index within the connection. */
typedef struct c4p_binding {
  char communicator[C4P_NAME_MAX + 1];
  uint32_t src_rank;
  uint32_t dst_rank;
  uint32_t channel;
  uint32_t qp;
  uint16_t udp_sport; /* 0xC000..0xFFFF; 0 in a callback: the binding was withdrawn */
  uint32_t flow_label; /* 20-bit GRH flow label that the kernel turns into udp_sport */
  uint64_t epoch;      /* the plan epoch that set it */
} c4p_binding;

typedef struct c4p_session c4p_session; /* opaque */

/* Called from the library's own thread for every binding that a re-plan changed (or withdrew:
 * udp_sport == 0). Keep it short; it may call c4p_lookup/c4p_apply_live but not c4p_close. */
typedef void (*c4p_replan_fn)(void *user, const c4p_binding *binding);

typedef struct c4p_options {
  size_t size;               /* sizeof(c4p_options): set by c4p_options_init */
  const char *socket_path;   /* agent mode: the agent's Unix socket */
  const char *bindings_file; /* static mode (instead of socket_path): a per-host file */
  const char *job_id;        /* required */
  const char *token;         /* agent mode: the job token from RegisterJob */
  const char *fabric;        /* static mode: the fabric the file must be for (required) */
  const char *host;          /* static mode: the host the file must be for (NULL: any) */
  int connect_timeout_ms;    /* agent mode: the first answer (default 5000) */
  c4p_log_fn log;            /* NULL: silent */
  void *log_user;
  int log_level;             /* messages up to this level are passed (default C4P_LOG_WARN) */
  int wire_version;          /* 0: C4P_WIRE_VERSION (other values only for tests) */
  c4p_replan_fn replan;      /* the re-plan callback from the start (or c4p_subscribe later:
                                changes that arrive in between are not called back) */
  void *replan_user;
} c4p_options;

/* Fill defaults; call before setting fields. */
C4P_API void c4p_options_init(c4p_options *options);

/* Open a session. Agent mode: connect, present the job token, receive every binding the agent
 * holds for the job on this host, and keep a thread that follows re-plans (reconnecting with
 * backoff when the agent restarts). Static mode: read the file, check job/fabric/host.
 * On error *out is NULL. */
C4P_API c4p_result c4p_open(const c4p_options *options, c4p_session **out);

/* The binding of one QP, copied to *out. C4P_ENOTYET at once if none is known. */
C4P_API c4p_result c4p_lookup(c4p_session *s, const char *communicator, uint32_t src_rank,
                              uint32_t dst_rank, uint32_t channel, uint32_t qp,
                              c4p_binding *out);

/* Call fn for every re-plan from now on (NULL: stop). One callback per session. */
C4P_API c4p_result c4p_subscribe(c4p_session *s, c4p_replan_fn fn, void *user);

/* The session's epoch, how many bindings it holds, and whether it is connected to the agent
 * now (always 0 in static mode). Any pointer may be NULL. */
C4P_API c4p_result c4p_status(c4p_session *s, uint64_t *epoch, size_t *bindings,
                              int *connected);

/* At connect time (before INIT->RTR): set is_global = 1 and the GRH flow label in a
 * `struct ibv_qp_attr` given as a pointer and the offsets of ah_attr.is_global (uint8_t) and
 * ah_attr.grh.flow_label (uint32_t). c4p_verbs.h wraps this for code that has verbs.h. */
C4P_API c4p_result c4p_apply_rtr(void *qp_attr, size_t is_global_offset,
                                 size_t flow_label_offset, const c4p_binding *binding);

/* On a live RC/UC QP in RTS (`struct ibv_qp *`): mlx5dv_modify_qp_udp_sport through
 * dlopen("libmlx5.so.1"). C4P_ENOTSUP when mlx5 is absent or the device refuses
 * (EOPNOTSUPP): keep the old port, apply the flow label on the next connect. */
C4P_API c4p_result c4p_apply_live(void *ibv_qp, const c4p_binding *binding);

/* End the session: stops its thread; no callback runs after it returns. NULL is fine. */
C4P_API void c4p_close(c4p_session *s);

/* -- reporting: the collective as a sensor (docs/api.md, "Reports") ---------------------------
 *
 * The collective library tells the host agent what its connections carried and when each rank
 * entered and left each collective call; the agent folds the samples into per-step summaries
 * for the controller's detector. Times are CLOCK_MONOTONIC nanoseconds (c4p_now_ns()).
 *
 * The report calls never block and never allocate: each writes one slot of a ring allocated
 * when the session opens (C4P_REPORT_RING slots, multi-producer: any thread may report) and
 * returns. A full ring drops the sample, counts it and returns C4P_EDROPPED. The session's
 * own thread sends the ring to the agent in REPORT frames every C4P_REPORT_FLUSH_MS. Without
 * the agent (not connected yet, restarting) samples accumulate, then drop, and are counted.
 * Static-mode sessions have no agent: every report call returns C4P_ENOTSUP. */
#define C4P_REPORT_RING 16384          /* slots per session (64 bytes each) */
#define C4P_REPORT_FLUSH_MS 20         /* how often the session's thread drains the ring */
#define C4P_REPORT_COMMS 4096          /* communicators one session can register */
#define C4P_COLLECTIVE_MAX 15          /* bytes of a collective's name kept (truncated beyond) */
#define C4P_STEP_UNKNOWN UINT64_MAX    /* a transfer whose call the library cannot tell */

/* CLOCK_MONOTONIC now, in nanoseconds. */
C4P_API uint64_t c4p_now_ns(void);

/* Register a communicator (the name the bindings use) once, outside the hot path; *id names it
 * in the report calls. The same name gives the same id. May allocate; C4P_EINVAL past
 * C4P_REPORT_COMMS. */
C4P_API c4p_result c4p_report_comm(c4p_session *s, const char *communicator, uint32_t *id);

/* A completed transfer on one connection (the binding's key: src rank -> dst rank, channel,
 * QP index): `bytes` moved between start_ns and end_ns, for the call numbered `step` (the
 * communicator's collective sequence number; C4P_STEP_UNKNOWN: the agent attributes it by
 * time to the src rank's call). */
C4P_API c4p_result c4p_report_transfer(c4p_session *s, uint32_t comm, uint32_t src_rank,
                                       uint32_t dst_rank, uint32_t channel, uint32_t qp,
                                       uint64_t step, uint64_t bytes, uint64_t start_ns,
                                       uint64_t end_ns);

/* A rank entered collective call `step` of a communicator (`collective`: "allreduce", ...,
 * NULL: ""; `bytes`: the call's message size). */
C4P_API c4p_result c4p_report_arrive(c4p_session *s, uint32_t comm, uint32_t rank,
                                     uint64_t step, const char *collective, uint64_t bytes,
                                     uint64_t t_ns);

/* The rank left call `step` (the collective completed for it). */
C4P_API c4p_result c4p_report_complete(c4p_session *s, uint32_t comm, uint32_t rank,
                                       uint64_t step, uint64_t t_ns);

/* Counters since the session opened: samples taken into the ring, sent to the agent, dropped
 * (ring full, or lost with a connection). Any pointer may be NULL. */
C4P_API c4p_result c4p_report_stats(c4p_session *s, uint64_t *taken, uint64_t *sent,
                                    uint64_t *dropped);

/* Send what the ring holds now, from the calling thread's point of view: wait (bounded by
 * timeout_ms) until the session's thread has drained every sample reported before this call.
 * For tests and for a clean exit; never call it on the hot path. C4P_ETIMEOUT if not drained. */
C4P_API c4p_result c4p_report_flush(c4p_session *s, int timeout_ms);

C4P_API const char *c4p_strerror(c4p_result code);
C4P_API uint32_t c4p_version(void);        /* C4P_VERSION of the library actually loaded */
C4P_API const char *c4p_version_string(void);
C4P_API int c4p_wire_version(void);        /* the agent protocol the library speaks */

/* The kernel's mapping (include/rdma/ib_verbs.h, rdma_flow_label_to_udp_sport). */
C4P_API uint16_t c4p_flow_label_to_udp_sport(uint32_t flow_label);

#ifdef __cplusplus
}
#endif
#endif /* C4P_H */
