/* nccl_driver: loads a profiler plugin the way NCCL does and replays an event sequence.
 *
 * NCCL (src/plugin/profiler.cc) dlopen()s the library, looks up ncclProfiler_v<N> and calls
 * init per communicator, then startEvent / recordEventState / stopEvent from its threads, and
 * finalize. This driver does the same from a recorded sequence, one command per stdin line:
 *
 *   load PATH VERSION                         -> "loaded NAME" | "noload REASON"   (4 or 5)
 *   init CTX NAME HASH NNODES NRANKS RANK     -> "init CTX CODE MASK"  (NAME "-": empty)
 *   coll CTX ID RANK SEQ FUNC COUNT DATATYPE  -> start a Coll event
 *   op CTX ID PARENT RANK CHANNEL PEER NSTEPS CHUNK ISSEND [other]
 *                                             -> a ProxyOp (PARENT "-": none; "other": from
 *                                                another process, as under PXN)
 *   step CTX ID PARENT RANK STEP              -> a ProxyStep of the ProxyOp PARENT
 *   state ID STATE [TRANSSIZE]                -> recordEventState
 *   stop ID                                   -> stopEvent
 *   sleep US
 *   finalize CTX                              -> "finalize CTX CODE"
 * Every start prints "start ID CODE TRACKED" (TRACKED: the plugin returned a handle). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_profiler_abi.h"

#define MAX_IDS 65536
#define MAX_CTX 64

static int version;
static const c4p_nccl_profiler_v4 *v4;
static const c4p_nccl_profiler_v5 *v5;
static void *handles[MAX_IDS];
static void *contexts[MAX_CTX];

static void logger(int level, unsigned long flags, const char *file, int line, const char *fmt,
                   ...) {
  (void)flags, (void)file, (void)line;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "nccl-log %d ", level);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* Start an event from a v5 descriptor (converted to v4 when that is the loaded version). */
static void start(int ctx, unsigned id, c4p_nccl_descr_v5 *d) {
  int rc;
  void *h = NULL;
  if (version == 5) {
    rc = v5->startEvent(contexts[ctx], &h, d);
  } else {
    c4p_nccl_descr_v4 d4;
    memset(&d4, 0, sizeof d4);
    d4.type = (uint8_t)d->type;
    d4.parentObj = d->parentObj;
    d4.rank = d->rank;
    memcpy(d4.reserved, d->reserved, sizeof d4.reserved);
    rc = v4->startEvent(contexts[ctx], &h, &d4);
  }
  handles[id] = h;
  printf("start %u %d %d\n", id, rc, h != NULL);
}

static void *parent_of(const char *word) {
  if (strcmp(word, "-") == 0) return NULL;
  unsigned id = (unsigned)strtoul(word, NULL, 10);
  return id < MAX_IDS ? handles[id] : NULL;
}

int main(void) {
  char line[1024];
  void *lib = NULL;
  while (fgets(line, sizeof line, stdin) != NULL) {
    char a[512], b[256], c[256];
    int ctx = 0, n1 = 0, n2 = 0, n3 = 0, n4 = 0, n5 = 0, n6 = 0;
    unsigned id = 0;
    unsigned long long u1 = 0, u2 = 0;
    c4p_nccl_descr_v5 d;
    memset(&d, 0, sizeof d);
    if (sscanf(line, "load %511s %d", a, &version) == 2) {
      lib = dlopen(a, RTLD_NOW | RTLD_LOCAL);
      char symbol[32];
      snprintf(symbol, sizeof symbol, "ncclProfiler_v%d", version);
      void *table = lib != NULL ? dlsym(lib, symbol) : NULL;
      if (table == NULL) {
        printf("noload %s\n", lib == NULL ? dlerror() : "no such symbol");
        return 3;
      }
      if (version == 4) v4 = table;
      else v5 = table;
      printf("loaded %s\n", version == 4 ? v4->name : v5->name);
    } else if (sscanf(line, "init %d %255s %llx %d %d %d", &ctx, b, &u1, &n1, &n2, &n3) == 6 &&
               ctx >= 0 && ctx < MAX_CTX) {
      int mask = -1;
      const char *name = strcmp(b, "-") == 0 ? "" : b;
      int rc = version == 4 ? v4->init(&contexts[ctx], &mask, name, u1, n1, n2, n3, logger)
                            : v5->init(&contexts[ctx], u1, &mask, name, n1, n2, n3, logger);
      printf("init %d %d %d\n", ctx, rc, mask);
    } else if (sscanf(line, "coll %d %u %d %llu %255s %llu %255s", &ctx, &id, &n1, &u1, b, &u2,
                      c) == 7 && id < MAX_IDS) {
      d.type = C4P_NCCL_EV_COLL;
      d.rank = n1;
      d.coll.seqNumber = u1;
      d.coll.func = b;
      d.coll.count = u2;
      d.coll.datatype = c;
      start(ctx, id, &d);
    } else if (sscanf(line, "op %d %u %255s %d %d %d %d %d %d %255s", &ctx, &id, b, &n1, &n2,
                      &n3, &n4, &n5, &n6, c) >= 9 && id < MAX_IDS) {
      int other = strstr(line, " other") != NULL;
      d.type = C4P_NCCL_EV_PROXY_OP;
      d.parentObj = parent_of(b);
      d.rank = n1;
      d.proxyOp.pid = getpid() + (other ? 1 : 0);
      d.proxyOp.channelId = (uint8_t)n2;
      d.proxyOp.peer = n3;
      d.proxyOp.nSteps = n4;
      d.proxyOp.chunkSize = n5;
      d.proxyOp.isSend = n6;
      start(ctx, id, &d);
    } else if (sscanf(line, "step %d %u %255s %d %d", &ctx, &id, b, &n1, &n2) == 5 &&
               id < MAX_IDS) {
      d.type = C4P_NCCL_EV_PROXY_STEP;
      d.parentObj = parent_of(b);
      d.rank = n1;
      d.proxyStep.step = n2;
      start(ctx, id, &d);
    } else if (sscanf(line, "state %u %d %llu", &id, &n1, &u1) >= 2 && id < MAX_IDS) {
      c4p_nccl_state_args args;
      memset(&args, 0, sizeof args);
      args.proxyStep.transSize = (size_t)u1;
      int rc = version == 4 ? v4->recordEventState(handles[id], n1, &args)
                            : v5->recordEventState(handles[id], n1, &args);
      if (rc != 0) printf("state %u %d\n", id, rc);
    } else if (sscanf(line, "stop %u", &id) == 1 && id < MAX_IDS) {
      int rc = version == 4 ? v4->stopEvent(handles[id]) : v5->stopEvent(handles[id]);
      handles[id] = NULL;
      if (rc != 0) printf("stop %u %d\n", id, rc);
    } else if (sscanf(line, "sleep %d", &n1) == 1) {
      struct timespec t = {n1 / 1000000, (long)(n1 % 1000000) * 1000};
      nanosleep(&t, NULL);
    } else if (sscanf(line, "finalize %d", &ctx) == 1 && ctx >= 0 && ctx < MAX_CTX) {
      int rc = version == 4 ? v4->finalize(contexts[ctx]) : v5->finalize(contexts[ctx]);
      contexts[ctx] = NULL;
      printf("finalize %d %d\n", ctx, rc);
    } else if (line[0] != '\n' && line[0] != '#') {
      printf("bad %s", line);
    }
    fflush(stdout);
  }
  if (lib != NULL) dlclose(lib);
  printf("done\n");
  return 0;
}
