/* c4p_pingpong: an RC ping-pong in the style of rdma-core's ibv_rc_pingpong, with its QP's
 * UDP source port taken from libc4p: the GRH flow label at INIT->RTR, and
 * mlx5dv_modify_qp_udp_sport on the live QP when the re-plan callback moves it.
 *
 *   c4p_pingpong --socket PATH --job ID --token T --comm C --src R --dst R [--channel N]
 *                [--qp N] [--dev NAME] [--gid-index N] [--iters N]
 *
 * To stay one self-contained file, both ends of the connection live in this process (two RC
 * QPs on the same port, connected to each other over RoCEv2), where ibv_rc_pingpong exchanges
 * LID/QPN/PSN/GID over TCP between two hosts; the verbs calls and their order are the same.
 * Without an RDMA device it says so and exits 77 (the "skipped" status of automake tests). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c4p.h"
#include "c4p_verbs.h"

struct end {
  struct ibv_qp *qp;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  char buf[64];
};

static struct end *live_end; /* the QP the re-plan callback moves */

static void on_replan(void *user, const c4p_binding *b) {
  const c4p_binding *mine = user;
  if (strcmp(b->communicator, mine->communicator) != 0 || b->src_rank != mine->src_rank ||
      b->dst_rank != mine->dst_rank || b->channel != mine->channel || b->qp != mine->qp)
    return;
  if (b->udp_sport == 0) return; /* withdrawn: keep the port until the QP is torn down */
  c4p_result rc = c4p_apply_qp(live_end->qp, b);
  printf("re-plan: QP %u -> UDP source port %u: %s\n", live_end->qp->qp_num, b->udp_sport,
         c4p_strerror(rc));
}

static int to_init(struct ibv_qp *qp, int port) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr_rts(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid *gid, int gid_index,
                      int port, const c4p_binding *binding) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = (uint8_t)port;
  if (binding != NULL) c4p_fill_rtr_attr(&a, binding); /* the planned path, from the start */
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return 1;
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int make_end(struct ibv_context *ctx, struct ibv_pd *pd, struct end *e) {
  e->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  e->mr = ibv_reg_mr(pd, e->buf, sizeof e->buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr init = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
                                          .max_recv_sge = 1}};
  e->qp = e->cq && e->mr ? ibv_create_qp(pd, &init) : NULL;
  return e->qp == NULL;
}

static int wait_one(struct ibv_cq *cq) {
  struct ibv_wc wc;
  for (long spins = 0; spins < 100000000L; spins++) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return 1;
    if (n == 1) return wc.status != IBV_WC_SUCCESS;
  }
  return 1;
}

static int ping(struct end *from, struct end *to) {
  struct ibv_sge rs = {(uintptr_t)to->buf, sizeof to->buf, to->mr->lkey};
  struct ibv_recv_wr rwr = {.sg_list = &rs, .num_sge = 1}, *bad_r;
  struct ibv_sge ss = {(uintptr_t)from->buf, sizeof from->buf, from->mr->lkey};
  struct ibv_send_wr swr = {.sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED}, *bad_s;
  if (ibv_post_recv(to->qp, &rwr, &bad_r) || ibv_post_send(from->qp, &swr, &bad_s)) return 1;
  return wait_one(from->cq) || wait_one(to->cq);
}

int main(int argc, char **argv) {
  c4p_options o;
  c4p_options_init(&o);
  c4p_binding want;
  memset(&want, 0, sizeof want);
  const char *dev_name = NULL;
  int gid_index = 0, iters = 100, port = 1, opt;
  static const struct option longs[] = {
      {"socket", 1, 0, 's'}, {"job", 1, 0, 'j'},     {"token", 1, 0, 't'},
      {"comm", 1, 0, 'c'},   {"src", 1, 0, 'r'},     {"dst", 1, 0, 'd'},
      {"channel", 1, 0, 'h'}, {"qp", 1, 0, 'q'},      {"dev", 1, 0, 'D'},
      {"gid-index", 1, 0, 'g'}, {"iters", 1, 0, 'n'}, {0, 0, 0, 0}};
  while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    switch (opt) {
      case 's': o.socket_path = optarg; break;
      case 'j': o.job_id = optarg; break;
      case 't': o.token = optarg; break;
      case 'c': snprintf(want.communicator, sizeof want.communicator, "%s", optarg); break;
      case 'r': want.src_rank = (uint32_t)atoi(optarg); break;
      case 'd': want.dst_rank = (uint32_t)atoi(optarg); break;
      case 'h': want.channel = (uint32_t)atoi(optarg); break;
      case 'q': want.qp = (uint32_t)atoi(optarg); break;
      case 'D': dev_name = optarg; break;
      case 'g': gid_index = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      default: return 2;
    }
  }
  int num = 0;
  struct ibv_device **devs = ibv_get_device_list(&num);
  struct ibv_device *dev = NULL;
  for (int i = 0; devs != NULL && i < num; i++)
    if (dev_name == NULL || strcmp(ibv_get_device_name(devs[i]), dev_name) == 0) dev = devs[i];
  if (dev == NULL) {
    printf("c4p_pingpong: no RDMA device on this machine: not run (skipped)\n");
    if (devs != NULL) ibv_free_device_list(devs);
    return 77;
  }
  c4p_session *s = NULL;
  c4p_result rc = o.socket_path ? c4p_open(&o, &s) : C4P_EINVAL;
  if (rc != C4P_OK) fprintf(stderr, "libc4p: %s: using the kernel's default port\n", c4p_strerror(rc));
  c4p_binding b;
  int have = s != NULL && c4p_lookup(s, want.communicator, want.src_rank, want.dst_rank,
                                     want.channel, want.qp, &b) == C4P_OK;
  struct ibv_context *ctx = ibv_open_device(dev);
  struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  struct end a, z;
  memset(&a, 0, sizeof a);
  memset(&z, 0, sizeof z);
  union ibv_gid gid;
  int failed = pd == NULL || make_end(ctx, pd, &a) || make_end(ctx, pd, &z) ||
               ibv_query_gid(ctx, (uint8_t)port, gid_index, &gid) || to_init(a.qp, port) ||
               to_init(z.qp, port) ||
               to_rtr_rts(a.qp, z.qp->qp_num, &gid, gid_index, port, have ? &b : NULL) ||
               to_rtr_rts(z.qp, a.qp->qp_num, &gid, gid_index, port, NULL);
  if (!failed) {
    printf("QP %u connected with flow label %u (UDP source port %u)\n", a.qp->qp_num,
           have ? b.flow_label : 0, have ? b.udp_sport : 0);
    live_end = &a;
    if (s != NULL) c4p_subscribe(s, on_replan, &want);
    for (int i = 0; i < iters && !failed; i++) failed = ping(&a, &z) || ping(&z, &a);
    if (s != NULL) c4p_subscribe(s, NULL, NULL);
    printf("%d round trips: %s\n", iters, failed ? "failed" : "ok");
  }
  c4p_close(s);
  if (a.qp) ibv_destroy_qp(a.qp);
  if (z.qp) ibv_destroy_qp(z.qp);
  if (a.mr) ibv_dereg_mr(a.mr);
  if (z.mr) ibv_dereg_mr(z.mr);
  if (a.cq) ibv_destroy_cq(a.cq);
  if (z.cq) ibv_destroy_cq(z.cq);
  if (pd) ibv_dealloc_pd(pd);
  if (ctx) ibv_close_device(ctx);
  ibv_free_device_list(devs);
  return failed;
}
