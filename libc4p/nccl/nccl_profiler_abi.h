/* The parts of NCCL's profiler plugin ABI that libnccl-profiler-c4p uses, versions 4 and 5.
 *
 * Written for this project from the documented interface (NCCL's plugins/profiler README and
 * its example headers): NCCL dlopen()s libnccl-profiler-<NCCL_PROFILER_PLUGIN>.so, looks up
 * the symbol ncclProfiler_v<N> (newest first) and calls the table's functions. Only the fields
 * this plugin reads are named; the layouts must match NCCL's byte for byte, so the offsets
 * that matter are pinned by static assertions below (LP64), checked against the published
 * headers by hand, and the test driver builds its descriptors from this same file.
 *
 * v4: the newest in NCCL 2.27.3 (init carries the communicator's name and hash).
 * v5: from NCCL 2.28.3 (the event type widens to 64 bits; API-level events, not enabled here);
 *     NCCL 2.29 looks for v6 first, then v5. */
#ifndef C4P_NCCL_PROFILER_ABI_H
#define C4P_NCCL_PROFILER_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int c4p_nccl_result; /* ncclResult_t; 0 = ncclSuccess */
#define C4P_NCCL_SUCCESS 0
#define C4P_NCCL_INTERNAL_ERROR 3

/* ncclDebugLogger_t: level, subsystem flags, file, line, printf format. */
typedef void (*c4p_nccl_logger)(int level, unsigned long flags, const char *file, int line,
                                const char *fmt, ...);
#define C4P_NCCL_LOG_WARN 2
#define C4P_NCCL_LOG_INFO 3
#define C4P_NCCL_SUBSYS_INIT 1

/* Event types (bits of the activation mask). */
enum {
  C4P_NCCL_EV_GROUP = 1 << 0,
  C4P_NCCL_EV_COLL = 1 << 1,
  C4P_NCCL_EV_P2P = 1 << 2,
  C4P_NCCL_EV_PROXY_OP = 1 << 3,
  C4P_NCCL_EV_PROXY_STEP = 1 << 4,
  C4P_NCCL_EV_PROXY_CTRL = 1 << 5,
  C4P_NCCL_EV_KERNEL_CH = 1 << 6,
  C4P_NCCL_EV_NET_PLUGIN = 1 << 7
};

/* Event states passed to recordEventState (the ones used here). */
enum {
  C4P_NCCL_ST_STEP_SEND_GPU_WAIT = 8,
  C4P_NCCL_ST_STEP_SEND_WAIT = 9, /* the step's data is on the network; transSize given */
  C4P_NCCL_ST_STEP_RECV_WAIT = 10,
  C4P_NCCL_ST_STEP_RECV_FLUSH_WAIT = 11,
  C4P_NCCL_ST_STEP_RECV_GPU_WAIT = 12,
  C4P_NCCL_ST_OP_IN_PROGRESS = 19, /* the GPU reached the operation: the proxy progresses it */
  C4P_NCCL_ST_STEP_SEND_PEER_WAIT = 20
};

/* The collective, proxy-operation and proxy-step members of the descriptor's union. Their
 * layout is the same in v4 and v5. */
typedef struct {
  uint64_t seqNumber; /* the collective's sequence number in its communicator */
  const char *func;   /* "AllReduce", ... */
  const void *sendBuff;
  void *recvBuff;
  size_t count;
  int root;
  const char *datatype; /* "ncclFloat32", ... */
  uint8_t nChannels;
  uint8_t nWarps;
  const char *algo;
  const char *proto;
} c4p_nccl_coll;

typedef struct {
  pid_t pid;         /* the process that owns the operation (another one under PXN) */
  uint8_t channelId; /* the channel */
  int peer;          /* the remote rank */
  int nSteps;
  int chunkSize;
  int isSend;
} c4p_nccl_proxy_op;

typedef struct {
  int step;
} c4p_nccl_proxy_step;

typedef struct {
  uint8_t type; /* one event type bit */
  void *parentObj; /* proxy op: the collective's handle; proxy step: the proxy op's handle */
  int rank;
  union {
    c4p_nccl_coll coll;
    c4p_nccl_proxy_op proxyOp;
    c4p_nccl_proxy_step proxyStep;
    unsigned char reserved[80]; /* the size of the largest v4 member (coll) */
  };
} c4p_nccl_descr_v4;

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    c4p_nccl_coll coll; /* v5 appends parentGroup after proto: not read */
    c4p_nccl_proxy_op proxyOp;
    c4p_nccl_proxy_step proxyStep;
    unsigned char reserved[88]; /* coll with its parentGroup */
  };
} c4p_nccl_descr_v5;

typedef union {
  struct {
    size_t transSize; /* bytes of the step */
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void *data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} c4p_nccl_state_args; /* v4 and v5 */

typedef struct {
  const char *name;
  c4p_nccl_result (*init)(void **context, int *eActivationMask, const char *commName,
                          uint64_t commHash, int nNodes, int nranks, int rank,
                          c4p_nccl_logger logfn);
  c4p_nccl_result (*startEvent)(void *context, void **eHandle, c4p_nccl_descr_v4 *eDescr);
  c4p_nccl_result (*stopEvent)(void *eHandle);
  c4p_nccl_result (*recordEventState)(void *eHandle, int eState, c4p_nccl_state_args *args);
  c4p_nccl_result (*finalize)(void *context);
} c4p_nccl_profiler_v4;

typedef struct {
  const char *name;
  c4p_nccl_result (*init)(void **context, uint64_t commId, int *eActivationMask,
                          const char *commName, int nNodes, int nranks, int rank,
                          c4p_nccl_logger logfn);
  c4p_nccl_result (*startEvent)(void *context, void **eHandle, c4p_nccl_descr_v5 *eDescr);
  c4p_nccl_result (*stopEvent)(void *eHandle);
  c4p_nccl_result (*recordEventState)(void *eHandle, int eState, c4p_nccl_state_args *args);
  c4p_nccl_result (*finalize)(void *context);
} c4p_nccl_profiler_v5;

/* The byte offsets NCCL's own headers give on LP64 (x86-64, aarch64). */
#if defined(__LP64__)
_Static_assert(offsetof(c4p_nccl_descr_v4, parentObj) == 8, "v4 parentObj");
_Static_assert(offsetof(c4p_nccl_descr_v4, rank) == 16, "v4 rank");
_Static_assert(offsetof(c4p_nccl_descr_v4, coll.seqNumber) == 24, "v4 coll.seqNumber");
_Static_assert(offsetof(c4p_nccl_descr_v4, coll.count) == 56, "v4 coll.count");
_Static_assert(offsetof(c4p_nccl_descr_v4, coll.datatype) == 72, "v4 coll.datatype");
_Static_assert(offsetof(c4p_nccl_descr_v4, proxyOp.channelId) == 28, "v4 proxyOp.channelId");
_Static_assert(offsetof(c4p_nccl_descr_v4, proxyOp.peer) == 32, "v4 proxyOp.peer");
_Static_assert(offsetof(c4p_nccl_descr_v4, proxyOp.isSend) == 44, "v4 proxyOp.isSend");
_Static_assert(offsetof(c4p_nccl_descr_v5, parentObj) == 8, "v5 parentObj");
_Static_assert(offsetof(c4p_nccl_descr_v5, coll.seqNumber) == 24, "v5 coll.seqNumber");
_Static_assert(offsetof(c4p_nccl_descr_v5, proxyOp.peer) == 32, "v5 proxyOp.peer");
#endif

#endif
