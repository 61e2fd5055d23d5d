/* c4p_check: drives libc4p from a test (tests/test_libc4p.py), one command per stdin line.
 *
 *   c4p_check (--socket PATH --token T | --file PATH --fabric F [--host H]) --job J
 *             [--wire-version N] [--timeout-ms N] [--log]
 *
 * Prints "open <code>" and exits 3 if c4p_open fails; else "open 0", then answers:
 *   lookup COMM SRC DST CH QP -> "binding COMM SRC DST CH QP SPORT LABEL EPOCH" | "none ... <code>"
 *   status                    -> "status EPOCH COUNT CONNECTED"
 *   bench ROUNDS              -> lookups of every key asked so far, ROUNDS times:
 *                                "bench P50_NS P99_NS LOOKUPS"
 *   reopen N                  -> open and close N more sessions with the same options:
 *                                "reopen N TOTAL_NS BINDINGS_PER_OPEN"
 *   threads N ROUNDS          -> N threads look up every key asked so far, ROUNDS times,
 *                                while the library's thread applies updates: "threads OK FAILED"
 *   comm NAME                 -> c4p_report_comm: "comm ID CODE"
 *   transfer ID SRC DST CH QP STEP BYTES START END  -> "report CODE"
 *   arrive ID RANK STEP COLLECTIVE BYTES T          -> "report CODE"
 *   complete ID RANK STEP T                         -> "report CODE"
 *   flush MS                  -> c4p_report_flush: "flush CODE"
 *   rstats                    -> "rstats TAKEN SENT DROPPED"
 *   rthreads N CALLS ID       -> N threads report CALLS transfers each on communicator ID
 *                                (src = thread, dst = thread + 1, bytes = 1, step = call):
 *                                "rthreads OK DROPPED OTHER"
 *   quit                      -> close the session, exit 0
 * Every re-plan callback prints "replan COMM SRC DST CH QP SPORT LABEL EPOCH". */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c4p.h"

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *kind, const c4p_binding *b) {
  pthread_mutex_lock(&out_lock);
  printf("%s %s %u %u %u %u %u %u %" PRIu64 "\n", kind, b->communicator, b->src_rank,
         b->dst_rank, b->channel, b->qp, b->udp_sport, b->flow_label, b->epoch);
  fflush(stdout);
  pthread_mutex_unlock(&out_lock);
}

static void on_replan(void *user, const c4p_binding *b) {
  (void)user;
  say("replan", b);
}

static void on_log(void *user, int level, const char *message) {
  (void)user;
  fprintf(stderr, "log %d %s\n", level, message);
}

typedef struct key {
  char comm[C4P_NAME_MAX + 1];
  uint32_t v[4];
} key;

typedef struct worker {
  c4p_session *s;
  const key *keys;
  size_t nkeys;
  unsigned rounds;
  size_t ok, failed;
  pthread_t id;
} worker;

static void *look(void *arg) {
  worker *w = arg;
  c4p_binding b;
  for (unsigned r = 0; r < w->rounds; r++)
    for (size_t i = 0; i < w->nkeys; i++) {
      const key *k = &w->keys[i];
      c4p_result rc = c4p_lookup(w->s, k->comm, k->v[0], k->v[1], k->v[2], k->v[3], &b);
      if (rc == C4P_OK && strcmp(b.communicator, k->comm) == 0 && b.udp_sport >= 0xC000 &&
          c4p_flow_label_to_udp_sport(b.flow_label) == b.udp_sport)
        w->ok++;
      else if (rc != C4P_ENOTYET)
        w->failed++;
    }
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct reporter {
  c4p_session *s;
  uint32_t comm, index;
  unsigned calls;
  size_t ok, dropped, other;
  pthread_t id;
} reporter;

static void *report_many(void *arg) {
  reporter *r = arg;
  for (unsigned i = 0; i < r->calls; i++) {
    uint64_t t = c4p_now_ns();
    c4p_result rc = c4p_report_transfer(r->s, r->comm, r->index, r->index + 1, 0, 0, i, 1, t, t);
    if (rc == C4P_OK) r->ok++;
    else if (rc == C4P_EDROPPED) r->dropped++;
    else r->other++;
  }
  return NULL;
}

static void answer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The report commands (see the top); 1 if the line was one of them. */
static int report_command(c4p_session *s, const char *line) {
  char name[C4P_NAME_MAX + 1];
  unsigned id, a, b, c, d, n;
  unsigned long long step, bytes, t0, t1;
  if (sscanf(line, "comm %128s", name) == 1) {
    uint32_t got = 0;
    c4p_result rc = c4p_report_comm(s, name, &got);
    answer("comm %u %d\n", got, (int)rc);
  } else if (sscanf(line, "transfer %u %u %u %u %u %llu %llu %llu %llu", &id, &a, &b, &c, &d,
                    &step, &bytes, &t0, &t1) == 9) {
    answer("report %d\n", (int)c4p_report_transfer(s, id, a, b, c, d, step, bytes, t0, t1));
  } else if (sscanf(line, "arrive %u %u %llu %128s %llu %llu", &id, &a, &step, name, &bytes,
                    &t0) == 6) {
    answer("report %d\n", (int)c4p_report_arrive(s, id, a, step, name, bytes, t0));
  } else if (sscanf(line, "complete %u %u %llu %llu", &id, &a, &step, &t0) == 4) {
    answer("report %d\n", (int)c4p_report_complete(s, id, a, step, t0));
  } else if (sscanf(line, "flush %u", &n) == 1) {
    answer("flush %d\n", (int)c4p_report_flush(s, (int)n));
  } else if (strncmp(line, "rstats", 6) == 0) {
    uint64_t taken = 0, sent = 0, dropped = 0;
    c4p_report_stats(s, &taken, &sent, &dropped);
    answer("rstats %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", taken, sent, dropped);
  } else if (sscanf(line, "rthreads %u %u %u", &n, &a, &id) == 3 && n > 0 && n <= 64) {
    reporter r[64];
    size_t ok = 0, dropped = 0, other = 0;
    for (unsigned i = 0; i < n; i++) {
      r[i] = (reporter){s, id, i, a, 0, 0, 0, 0};
      if (pthread_create(&r[i].id, NULL, report_many, &r[i]) != 0) exit(4);
    }
    for (unsigned i = 0; i < n; i++) {
      pthread_join(r[i].id, NULL);
      ok += r[i].ok;
      dropped += r[i].dropped;
      other += r[i].other;
    }
    answer("rthreads %zu %zu %zu\n", ok, dropped, other);
  } else {
    return 0;
  }
  return 1;
}

static void answer(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&out_lock);
  vprintf(fmt, ap);
  fflush(stdout);
  pthread_mutex_unlock(&out_lock);
  va_end(ap);
}

static uint64_t ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
  c4p_options o;
  c4p_options_init(&o);
  for (int i = 1; i + 1 < argc || (i < argc && strcmp(argv[i], "--log") == 0); i++) {
    const char *a = argv[i];
    if (strcmp(a, "--log") == 0) {
      o.log = on_log;
      o.log_level = C4P_LOG_DEBUG;
      continue;
    }
    const char *v = argv[++i];
    if (strcmp(a, "--socket") == 0) o.socket_path = v;
    else if (strcmp(a, "--file") == 0) o.bindings_file = v;
    else if (strcmp(a, "--job") == 0) o.job_id = v;
    else if (strcmp(a, "--token") == 0) o.token = v;
    else if (strcmp(a, "--fabric") == 0) o.fabric = v;
    else if (strcmp(a, "--host") == 0) o.host = v;
    else if (strcmp(a, "--wire-version") == 0) o.wire_version = atoi(v);
    else if (strcmp(a, "--timeout-ms") == 0) o.connect_timeout_ms = atoi(v);
    else {
      fprintf(stderr, "unknown option %s\n", a);
      return 2;
    }
  }
  o.replan = on_replan; /* from the start: no change is missed */
  c4p_session *s = NULL;
  c4p_result rc = c4p_open(&o, &s);
  printf("open %d %s\n", (int)rc, c4p_strerror(rc));
  fflush(stdout);
  if (rc != C4P_OK) return 3;
  c4p_subscribe(s, on_replan, NULL); /* the same callback again: exercises the call */
  key *keys = NULL;
  size_t nkeys = 0, capkeys = 0;
  char line[1024];
  while (fgets(line, sizeof line, stdin) != NULL) {
    char comm[C4P_NAME_MAX + 1];
    unsigned v[4];
    unsigned rounds = 0;
    if (report_command(s, line)) continue;
    if (sscanf(line, "lookup %128s %u %u %u %u", comm, &v[0], &v[1], &v[2], &v[3]) == 5) {
      c4p_binding b;
      rc = c4p_lookup(s, comm, v[0], v[1], v[2], v[3], &b);
      if (rc == C4P_OK) {
        say("binding", &b);
      } else {
        pthread_mutex_lock(&out_lock);
        printf("none %s %u %u %u %u %d\n", comm, v[0], v[1], v[2], v[3], (int)rc);
        fflush(stdout);
        pthread_mutex_unlock(&out_lock);
      }
      if (nkeys == capkeys) {
        capkeys = capkeys ? capkeys * 2 : 64;
        key *grown = realloc(keys, capkeys * sizeof *keys);
        if (grown == NULL) return 4;
        keys = grown;
      }
      strcpy(keys[nkeys].comm, comm);
      memcpy(keys[nkeys].v, v, sizeof v);
      nkeys++;
    } else if (strncmp(line, "status", 6) == 0) {
      uint64_t epoch = 0;
      size_t count = 0;
      int connected = 0;
      c4p_status(s, &epoch, &count, &connected);
      pthread_mutex_lock(&out_lock);
      printf("status %" PRIu64 " %zu %d\n", epoch, count, connected);
      fflush(stdout);
      pthread_mutex_unlock(&out_lock);
    } else if (sscanf(line, "bench %u", &rounds) == 1 && nkeys > 0) {
      size_t total = (size_t)rounds * nkeys;
      uint64_t *t = malloc(total * sizeof *t);
      if (t == NULL) return 4;
      c4p_binding b;
      for (size_t i = 0; i < total; i++) {
        const key *k = &keys[i % nkeys];
        uint64_t t0 = ns();
        c4p_lookup(s, k->comm, k->v[0], k->v[1], k->v[2], k->v[3], &b);
        t[i] = ns() - t0;
      }
      qsort(t, total, sizeof *t, cmp_u64);
      pthread_mutex_lock(&out_lock);
      printf("bench %" PRIu64 " %" PRIu64 " %zu\n", t[total / 2], t[(total * 99) / 100], total);
      fflush(stdout);
      pthread_mutex_unlock(&out_lock);
      free(t);
    } else if (sscanf(line, "reopen %u", &rounds) == 1) {
      size_t count = 0;
      uint64_t t0 = ns();
      for (unsigned i = 0; i < rounds; i++) {
        c4p_session *again = NULL;
        if (c4p_open(&o, &again) != C4P_OK) return 5;
        c4p_status(again, NULL, &count, NULL);
        c4p_close(again);
      }
      pthread_mutex_lock(&out_lock);
      printf("reopen %u %" PRIu64 " %zu\n", rounds, ns() - t0, count);
      fflush(stdout);
      pthread_mutex_unlock(&out_lock);
    } else if (sscanf(line, "threads %u %u", &v[0], &rounds) == 2 && v[0] > 0 && v[0] <= 64) {
      worker w[64];
      size_t ok = 0, failed = 0;
      for (unsigned i = 0; i < v[0]; i++) {
        w[i] = (worker){s, keys, nkeys, rounds, 0, 0, 0};
        if (pthread_create(&w[i].id, NULL, look, &w[i]) != 0) return 4;
      }
      for (unsigned i = 0; i < v[0]; i++) {
        pthread_join(w[i].id, NULL);
        ok += w[i].ok;
        failed += w[i].failed;
      }
      pthread_mutex_lock(&out_lock);
      printf("threads %zu %zu\n", ok, failed);
      fflush(stdout);
      pthread_mutex_unlock(&out_lock);
    } else if (strncmp(line, "quit", 4) == 0) {
      break;
    }
  }
  c4p_close(s);
  free(keys);
  printf("closed\n");
  return 0;
}
