/* c4p_report_bench: the per-call cost of libc4p's report calls (`make -C libc4p bench`).
 *
 * A session needs an agent, so the bench serves one on a Unix socket in a thread of its own:
 * it welcomes the session and reads (and counts) every REPORT frame, as the real agent does.
 * Each call is timed alone (two CLOCK_MONOTONIC reads around it; the timer's own cost, measured
 * the same way around nothing, is printed beside and NOT subtracted). Calls go in bursts of
 * 8,192 (half the ring) followed by c4p_report_flush, so what is measured is the taking path,
 * not a full ring; unpaced calls (the ring full most of the time) are measured separately.
 *
 *   c4p_report_bench [CALLS]    (default 1,000,000 per measure)
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "c4p.h"

#define BURST 8192

static int listener = -1;
static uint64_t frames_read = 0;

/* The fake agent: one session; WELCOME with no bindings, then read until EOF. */
static void *agent(void *arg) {
  (void)arg;
  int fd = accept(listener, NULL, NULL);
  if (fd < 0) return NULL;
  uint8_t buf[1 << 16];
  if (recv(fd, buf, sizeof buf, 0) <= 0) { /* HELLO */
    close(fd);
    return NULL;
  }
  /* header "C4PL" v1 type 2, payload: known 0, host "b", epoch 0, FULL, 0 bindings, 0 removed */
  uint8_t w[12 + 1 + 3 + 8 + 1 + 4 + 4];
  memset(w, 0, sizeof w);
  memcpy(w, "C4PL", 4);
  w[5] = 1;
  w[7] = 2;
  w[11] = (uint8_t)(sizeof w - 12);
  w[12] = 0;      /* known */
  w[14] = 1;      /* host length */
  w[15] = 'b';    /* host */
  w[24] = 1;      /* kind FULL (after epoch u64 at 16..23) */
  if (send(fd, w, sizeof w, MSG_NOSIGNAL) != (ssize_t)sizeof w) {
    close(fd);
    return NULL;
  }
  ssize_t r;
  while ((r = recv(fd, buf, sizeof buf, 0)) > 0)
    __atomic_add_fetch(&frames_read, (uint64_t)r, __ATOMIC_RELAXED);
  close(fd);
  return NULL;
}

static uint64_t now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void print(const char *what, uint64_t *t, size_t n, size_t failed) {
  qsort(t, n, sizeof *t, cmp);
  printf("%-28s p50 %4" PRIu64 " ns  p99 %4" PRIu64 " ns  p99.9 %5" PRIu64
         " ns  calls %zu  not taken %zu\n",
         what, t[n / 2], t[n * 99 / 100], t[n * 999 / 1000], n, failed);
}

typedef struct job {
  c4p_session *s;
  uint32_t comm;
  int kind; /* 0 timer, 1 transfer, 2 arrive, 3 complete */
  size_t calls, failed;
  uint64_t *t;
  int flush;
  uint32_t rank;
} job;

static void *run(void *arg) {
  job *j = arg;
  for (size_t i = 0; i < j->calls; i++) {
    uint64_t t0 = now();
    c4p_result rc = C4P_OK;
    if (j->kind == 1)
      rc = c4p_report_transfer(j->s, j->comm, j->rank, j->rank + 1, 3, 0, i, 524288, t0, t0 + 1);
    else if (j->kind == 2)
      rc = c4p_report_arrive(j->s, j->comm, j->rank, i, "AllReduce", 1 << 20, t0);
    else if (j->kind == 3)
      rc = c4p_report_complete(j->s, j->comm, j->rank, i, t0);
    j->t[i] = now() - t0;
    if (rc != C4P_OK) j->failed++;
    if (j->flush && (i + 1) % BURST == 0) c4p_report_flush(j->s, 10000);
  }
  return NULL;
}

int main(int argc, char **argv) {
  size_t calls = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1000000;
  if (calls < 1000) calls = 1000;
  char path[96];
  snprintf(path, sizeof path, "/tmp/c4p-bench-%d.sock", (int)getpid());
  unlink(path);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  listener = socket(AF_UNIX, SOCK_STREAM, 0);
  if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      listen(listener, 1) != 0) {
    perror("bench socket");
    return 1;
  }
  pthread_t agent_thread;
  pthread_create(&agent_thread, NULL, agent, NULL);
  c4p_options o;
  c4p_options_init(&o);
  o.socket_path = path;
  o.job_id = "bench";
  o.token = "t";
  c4p_session *s = NULL;
  c4p_result rc = c4p_open(&o, &s);
  unlink(path);
  if (rc != C4P_OK) {
    fprintf(stderr, "c4p_open: %s\n", c4p_strerror(rc));
    return 1;
  }
  uint32_t comm = 0;
  c4p_report_comm(s, "dp", &comm);
  uint64_t *t = malloc(calls * 2 * sizeof *t);
  if (t == NULL) return 1;
  printf("libc4p report calls, %zu calls per measure, bursts of %d then a flush\n", calls, BURST);
  const char *names[] = {"clock_gettime pair (timer)", "c4p_report_transfer",
                         "c4p_report_arrive", "c4p_report_complete"};
  for (int kind = 0; kind <= 3; kind++) {
    job j = {s, comm, kind, calls, 0, t, 1, 0};
    run(&j);
    print(names[kind], t, calls, j.failed);
  }
  /* Two threads at once on the same ring (the CAS contended). */
  job a = {s, comm, 1, calls, 0, t, 1, 0}, b = {s, comm, 1, calls, 0, t + calls, 1, 2};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, run, &a);
  pthread_create(&tb, NULL, run, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  print("transfer, 2 threads", t, calls * 2, a.failed + b.failed);
  /* The drop path: the ring full (no flush, far more calls than slots). */
  job d = {s, comm, 1, calls, 0, t, 0, 0};
  run(&d);
  print("transfer, unpaced (ring full)", t, calls, d.failed);
  uint64_t taken = 0, sent = 0, dropped = 0;
  c4p_report_flush(s, 10000);
  c4p_report_stats(s, &taken, &sent, &dropped);
  c4p_close(s);
  pthread_join(agent_thread, NULL);
  printf("samples taken %" PRIu64 ", sent %" PRIu64 ", dropped %" PRIu64 "; %" PRIu64
         " bytes of REPORT frames read by the agent (%.1f bytes/sample)\n",
         taken, sent, dropped, frames_read, sent ? (double)frames_read / (double)sent : 0.0);
  free(t);
  close(listener);
  return 0;
}
