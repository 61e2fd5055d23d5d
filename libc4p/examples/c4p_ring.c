/* c4p_ring: one rank of a ring exchange over UDP, on the source ports libc4p gives it, reporting
 * through libc4p's reporting API -- the collective workload of `c4p lab detect`.
 *
 *   c4p_ring --socket PATH --job ID --token T --comm C --rank R --ranks N --src ADDR --next ADDR
 *            [--prev ADDR] [--qps Q] [--bytes B] [--rounds K] [--compute-ms M] [--slow-ms S]
 *            [--gap-ms G] [--steps N] [--step0 N] [--wait-s S] [--quiet-steps N]
 *
 * Each step: compute (sleep M ms, plus S ms while compute-slow), arrive, then K rounds; in each
 * round the rank sends B bytes to the next rank, split over its Q QPs (QP q leaves from UDP
 * source port = its binding for (C, R, R+1 mod N, channel 0, q), to port 4791, as RoCEv2 would,
 * so the fabric hashes it onto its planned path), and waits for the previous rank's B bytes of
 * the same round -- a ring all-reduce's dependency chain (2(N-1) rounds make one all-reduce).
 * With --prev, a second ring runs the other way at the same time: in each round the rank also
 * sends B bytes to the previous rank on the QPs of its binding (C, R, R-1 mod N, channel 0, q)
 * and waits for the next rank's B bytes too, as NCCL runs its rings over several channels and
 * its trees both ways. Why: in a one-way ring a host's downlink carries exactly the QPs its
 * predecessor's uplink carries, so no timing tells the two links apart; both ways, each host
 * link is crossed by QPs of its own in each direction, and the detector's tomography can name
 * a slowed one. (Channel 0 both ways: the controller's explicit connections have one channel;
 * the rank pair says which way.)
 * Every received QP's bytes are reported as a transfer (first to last datagram), then complete.
 * The binding is looked up again every step: a re-plan moves the QP's socket to its new port.
 *
 * Receiving: a raw IPPROTO_UDP socket (root), so no socket listens on 4791 and the kernel still
 * answers the agents' probes to 4791 with port unreachable. A round whose datagrams stopped
 * coming for G ms is given up (the lost bytes are not retransmitted: the transfer ends then,
 * slow, as a RoCE retransmission timeout would make it). A round that never starts is waited
 * for (a hung peer hangs the ring, as it would a collective), up to --wait-s.
 *
 * Signals: SIGUSR1 compute-slow on, SIGUSR2 off, SIGHUP message size x4 / back, SIGTERM stop.
 * The first --quiet-steps steps are not reported (warm-up, as nccl-tests runs before timing).
 * Prints one line per step: "step N END_NS ITER_NS" (CLOCK_MONOTONIC). Linux, IPv4. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "c4p.h"

#define MAGIC 0xC4D0C4D0u
#define DPORT 4791
#define MAXQ 16
#define SLOTS 256
#define PAYLOAD 1200

struct hdr {
  uint32_t magic, src_rank, qp, count, seq, way; /* way 0: to the next rank, 1: to the previous */
  uint64_t round; /* step * rounds + round */
};

/* Per round, per incoming QP: index way * MAXQ + qp (way 0 from the previous rank, 1 from the
 * next). */
#define IN (2 * MAXQ)
struct slot {
  uint64_t round;
  uint64_t seen[IN]; /* datagrams by sequence number: a re-sent one is not counted twice */
  uint32_t got[IN];
  uint32_t want[IN];
  uint64_t bytes[IN];
  uint64_t first[IN], last[IN];
};

static volatile sig_atomic_t slow, big, stop;
static void on_signal(int sig) {
  if (sig == SIGUSR1) slow = 1;
  else if (sig == SIGUSR2) slow = 0;
  else if (sig == SIGHUP) big = !big;
  else stop = 1;
}

static struct slot slots[SLOTS];

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR && !stop) {
  }
}

static struct slot *slot_for(uint64_t round) {
  struct slot *s = &slots[round % SLOTS];
  if (s->round != round) {
    memset(s, 0, sizeof *s);
    s->round = round;
  }
  return s;
}

/* Read every datagram waiting on the raw socket into its round's slot: the previous rank's
 * going our way (way 0), and when both ways run, the next rank's coming back (way 1). */
static void drain_raw(int raw, uint32_t prev, uint32_t next, int both, uint64_t current) {
  unsigned char pkt[2048];
  char control[256];
  struct timespec real, mono;
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  int64_t offset = ((int64_t)real.tv_sec - mono.tv_sec) * 1000000000LL + (real.tv_nsec - mono.tv_nsec);
  for (;;) {
    struct iovec iov = {pkt, sizeof pkt};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                       .msg_controllen = sizeof control};
    ssize_t n = recvmsg(raw, &m, MSG_DONTWAIT);
    if (n < 0) return;
    /* The kernel's arrival time (SO_TIMESTAMPNS, wall clock): when the datagram came, not
     * when this process got the CPU to read it. */
    uint64_t now = c4p_now_ns();
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(c), sizeof ts);
        int64_t t = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec - offset;
        if (t > 0 && (uint64_t)t <= now) now = (uint64_t)t;
      }
    if ((size_t)n < sizeof(struct ip)) continue;
    struct ip *iph = (struct ip *)pkt;
    size_t off = (size_t)iph->ip_hl * 4;
    if ((size_t)n < off + sizeof(struct udphdr) + sizeof(struct hdr)) continue;
    struct udphdr *u = (struct udphdr *)(pkt + off);
    if (ntohs(u->uh_dport) != DPORT) continue;
    struct hdr h;
    memcpy(&h, pkt + off + sizeof *u, sizeof h);
    if (h.magic != MAGIC || h.qp >= MAXQ || h.way > 1) continue;
    if (h.way == 0 ? h.src_rank != prev : !both || h.src_rank != next) continue;
    if (h.round < current || h.round >= current + SLOTS) continue; /* late or absurd */
    struct slot *s = slot_for(h.round);
    uint32_t i = h.way * MAXQ + h.qp;
    if (h.seq >= 64 || (s->seen[i] >> h.seq & 1)) continue;
    s->seen[i] |= 1ull << h.seq;
    if (s->got[i] == 0) s->first[i] = now;
    s->got[i]++;
    s->want[i] = h.count;
    s->bytes[i] += (uint64_t)(n - (ssize_t)off - (ssize_t)sizeof *u);
    s->last[i] = now;
  }
}

#define RESEND 16                  /* rounds kept for re-sending */
#define RESEND_NS 1000000000ull     /* re-send after this long without a datagram */
struct sent_round {
  uint64_t round;
  uint32_t count;
};

/* One round of ours one way: `count` datagrams on each QP, interleaved over the QPs. */
static void send_round(const int *fds, uint32_t qps, const struct sockaddr_in *dst,
                       unsigned char *buf, uint32_t rank, uint32_t way, uint64_t round,
                       uint32_t count) {
  struct hdr h = {MAGIC, rank, 0, count, 0, way, round};
  for (uint32_t i = 0; i < count; i++)
    for (uint32_t q = 0; q < qps; q++) {
      h.qp = q;
      h.seq = i;
      memcpy(buf, &h, sizeof h);
      for (int attempt = 0; attempt < 3; attempt++) /* an earlier ICMP error surfaces */
        if (sendto(fds[q], buf, PAYLOAD, 0, (const struct sockaddr *)dst, sizeof *dst) >= 0 ||
            errno != ECONNREFUSED)
          break;
    }
}

static int bind_udp(const char *addr, uint16_t sport) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(sport)};
  inet_pton(AF_INET, addr, &a.sin_addr);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Each QP's socket on its bound source port (looked up again: a re-plan moves it). At the
 * start, wait up to 60 s for the bindings; later, keep the old port while none is known. */
static int rebind(c4p_session *s, const char *comm, uint32_t rank, uint32_t to, uint32_t qps,
                  const char *src, int *fds, uint16_t *ports) {
  for (uint32_t q = 0; q < qps; q++) {
    c4p_binding b;
    c4p_result rc;
    uint64_t deadline = c4p_now_ns() + 60ull * 1000000000ull;
    while ((rc = c4p_lookup(s, comm, rank, to, 0, q, &b)) != C4P_OK && !stop &&
           c4p_now_ns() < deadline && fds[q] < 0)
      sleep_ms(50);
    if (rc == C4P_OK && b.udp_sport != ports[q]) {
      if (fds[q] >= 0) close(fds[q]);
      fds[q] = bind_udp(src, b.udp_sport);
      ports[q] = fds[q] >= 0 ? b.udp_sport : 0;
    }
    if (fds[q] < 0) {
      fprintf(stderr, "c4p_ring: rank %u QP %u: no binding or port (%s)\n", rank, q,
              c4p_strerror(rc));
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  c4p_options o;
  c4p_options_init(&o);
  const char *comm = "dp", *src = NULL, *next = NULL, *back = NULL;
  uint32_t rank = 0, ranks = 0, qps = 4, rounds = 4;
  long bytes = 32768, compute_ms = 20, slow_ms = 200, gap_ms = 60, wait_s = 600;
  uint64_t steps = UINT64_MAX, step0 = 0, quiet = 0;
  static const struct option longs[] = {
      {"socket", 1, 0, 's'}, {"job", 1, 0, 'j'},     {"token", 1, 0, 't'},   {"comm", 1, 0, 'c'},
      {"rank", 1, 0, 'r'},   {"ranks", 1, 0, 'n'},   {"src", 1, 0, 'a'},     {"next", 1, 0, 'b'},
      {"qps", 1, 0, 'q'},    {"bytes", 1, 0, 'B'},   {"rounds", 1, 0, 'K'},  {"compute-ms", 1, 0, 'm'},
      {"slow-ms", 1, 0, 'S'}, {"gap-ms", 1, 0, 'g'}, {"steps", 1, 0, 'N'},   {"step0", 1, 0, '0'},
      {"wait-s", 1, 0, 'w'}, {"quiet-steps", 1, 0, 'Q'}, {"prev", 1, 0, 'p'}, {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    switch (opt) {
      case 's': o.socket_path = optarg; break;
      case 'j': o.job_id = optarg; break;
      case 't': o.token = optarg; break;
      case 'c': comm = optarg; break;
      case 'r': rank = (uint32_t)atoi(optarg); break;
      case 'n': ranks = (uint32_t)atoi(optarg); break;
      case 'a': src = optarg; break;
      case 'b': next = optarg; break;
      case 'p': back = optarg; break;
      case 'q': qps = (uint32_t)atoi(optarg); break;
      case 'B': bytes = atol(optarg); break;
      case 'K': rounds = (uint32_t)atoi(optarg); break;
      case 'm': compute_ms = atol(optarg); break;
      case 'S': slow_ms = atol(optarg); break;
      case 'g': gap_ms = atol(optarg); break;
      case 'N': steps = strtoull(optarg, NULL, 10); break;
      case '0': step0 = strtoull(optarg, NULL, 10); break;
      case 'w': wait_s = atol(optarg); break;
      case 'Q': quiet = strtoull(optarg, NULL, 10); break;
      default: return 2;
    }
  }
  if (!o.socket_path || !o.job_id || !src || !next || ranks < 2 || rank >= ranks || qps < 1 ||
      qps > MAXQ || rounds < 1 || bytes < 1 || (4 * bytes + qps - 1) / qps > 64 * PAYLOAD ||
      gap_ms < 1 || (back && ranks < 3)) {
    fprintf(stderr, "c4p_ring: --socket, --job, --src, --next, --ranks >= 2, --rank < ranks, "
                    "--qps 1..16, --bytes up to 16 * qps KiB are needed (--prev: --ranks >= 3)\n");
    return 2;
  }
  signal(SIGUSR1, on_signal);
  signal(SIGUSR2, on_signal);
  signal(SIGHUP, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  uint32_t to = (rank + 1) % ranks, prev = (rank + ranks - 1) % ranks;
  int both = back != NULL, ways = both ? 2 : 1;
  uint32_t peer[2] = {to, prev}; /* whom each way sends to */
  uint32_t from[2] = {prev, to}; /* whom each way receives from */
  c4p_session *s = NULL;
  c4p_result rc = c4p_open(&o, &s);
  if (rc != C4P_OK) {
    fprintf(stderr, "c4p_ring: c4p_open: %s\n", c4p_strerror(rc));
    return 1;
  }
  uint32_t cid = 0;
  c4p_report_comm(s, comm, &cid);
  int raw = socket(AF_INET, SOCK_RAW, IPPROTO_UDP);
  int rcvbuf = 8 << 20;
  if (raw < 0) {
    perror("c4p_ring: raw socket (needs root)");
    return 1;
  }
  setsockopt(raw, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  int on = 1;
  setsockopt(raw, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
  struct sockaddr_in me = {.sin_family = AF_INET};
  inet_pton(AF_INET, src, &me.sin_addr);
  bind(raw, (struct sockaddr *)&me, sizeof me);
  struct sockaddr_in dst[2];
  for (int w = 0; w < 2; w++) {
    dst[w] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(DPORT)};
    if (inet_pton(AF_INET, w == 0 ? next : (back ? back : next), &dst[w].sin_addr) != 1) {
      fprintf(stderr, "c4p_ring: --%s %s: not an IPv4 address\n", w == 0 ? "next" : "prev",
              w == 0 ? next : back);
      return 2;
    }
  }
  int fds[2][MAXQ];
  uint16_t ports[2][MAXQ];
  for (int w = 0; w < 2; w++)
    for (uint32_t q = 0; q < qps; q++) fds[w][q] = -1, ports[w][q] = 0;
  unsigned char buf[PAYLOAD];
  memset(buf, 0xab, sizeof buf);
  uint64_t last_done = 0;
  struct sent_round sent[RESEND];
  uint32_t sent_n = 0;
  for (uint64_t step = step0; step - step0 < steps && !stop; step++) {
    /* The bindings, again each step: a re-plan moves a QP to its new port. */
    for (int w = 0; w < ways; w++)
      if (rebind(s, comm, rank, peer[w], qps, src, fds[w], ports[w]) != 0) {
        c4p_close(s);
        return 1;
      }
    sleep_ms(compute_ms + (slow ? slow_ms : 0));
    long size = big ? 4 * bytes : bytes;
    uint64_t t_arrive = c4p_now_ns();
    int report = step >= step0 + quiet; /* warm-up steps (ARP, first lookups) go unreported */
    if (report) c4p_report_arrive(s, cid, rank, step, "allreduce", (uint64_t)size * rounds, t_arrive);
    long per_qp = (size + qps - 1) / qps;
    uint32_t count = (uint32_t)((per_qp + PAYLOAD - 1) / PAYLOAD);
    for (uint32_t r = 0; r < rounds && !stop; r++) {
      uint64_t round = step * rounds + r;
      sent[sent_n % RESEND] = (struct sent_round){round, count};
      sent_n++;
      for (int w = 0; w < ways; w++)
        send_round(fds[w], qps, &dst[w], buf, rank, (uint32_t)w, round, count);
      /* Wait for the previous rank's datagrams of this round (and the next rank's). */
      uint64_t since = c4p_now_ns(), give_up = since + (uint64_t)wait_s * 1000000000ull;
      uint64_t hushed = since;
      struct slot *sl = slot_for(round);
      for (;;) {
        drain_raw(raw, prev, to, both, round);
        sl = slot_for(round);
        /* Each way on its own: complete, or started and then quiet for G ms (lost: given
         * up), or not started (waited for: a hung peer hangs both its neighbours). */
        int ended = 0, waiting = 0;
        uint64_t now = c4p_now_ns();
        for (int w = 0; w < ways; w++) {
          uint32_t done = 0, started = 0;
          uint64_t newest = 0;
          for (uint32_t q = 0; q < qps; q++) {
            uint32_t i = (uint32_t)w * MAXQ + q;
            done += sl->want[i] && sl->got[i] >= sl->want[i];
            started += sl->got[i] > 0;
            if (sl->last[i] > newest) newest = sl->last[i];
          }
          ended += done == qps || (started && now - newest > (uint64_t)gap_ms * 1000000ull);
          waiting += !started;
        }
        if (ended == ways || stop || now > give_up) break;
        if (waiting && now - hushed > RESEND_NS) { /* nothing for a second: a whole round of
          ours may be lost too (a cut link); send what the next rank may still wait for */
          for (int w = 0; w < ways; w++) { /* a re-plan routes around it */
            rebind(s, comm, rank, peer[w], qps, src, fds[w], ports[w]);
            for (uint32_t k = 0; k < RESEND && k < sent_n; k++)
              send_round(fds[w], qps, &dst[w], buf, rank, (uint32_t)w, sent[k].round,
                         sent[k].count);
          }
          hushed = now;
        }
        struct pollfd p = {raw, POLLIN, 0};
        poll(&p, 1, 5);
      }
      uint64_t now = c4p_now_ns();
      for (int w = 0; w < ways && report; w++) {
        const uint32_t *got = sl->got + w * MAXQ, *want = sl->want + w * MAXQ;
        int any = 0;
        for (uint32_t q = 0; q < qps; q++) any |= got[q] > 0;
        for (uint32_t q = 0; q < qps; q++) {
          uint32_t i = (uint32_t)w * MAXQ + q;
          if (got[q] == 0) { /* its peers' datagrams came, none of its own: nothing moved */
            if (any && !stop) c4p_report_transfer(s, cid, from[w], rank, 0, q, step, 0, since, now);
            continue;
          }
          int complete = got[q] >= want[q];
          c4p_report_transfer(s, cid, from[w], rank, 0, q, step, sl->bytes[i], sl->first[i],
                              complete ? sl->last[i] : now);
        }
      }
    }
    uint64_t t_done = c4p_now_ns();
    if (report) c4p_report_complete(s, cid, rank, step, t_done);
    printf("step %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", step, t_done,
           last_done ? t_done - last_done : 0);
    fflush(stdout);
    last_done = t_done;
  }
  c4p_report_flush(s, 2000);
  for (int w = 0; w < 2; w++)
    for (uint32_t q = 0; q < qps; q++)
      if (fds[w][q] >= 0) close(fds[w][q]);
  close(raw);
  c4p_close(s);
  return 0;
}
