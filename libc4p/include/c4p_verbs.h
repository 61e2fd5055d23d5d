/*
 * c4p_verbs.h -- optional helpers for code that already includes <infiniband/verbs.h>.
 * c4p.h itself needs no verbs headers; this file only passes the field offsets of
 * struct ibv_qp_attr to c4p_apply_rtr.
 */
#ifndef C4P_VERBS_H
#define C4P_VERBS_H

#include <infiniband/verbs.h>
#include <stddef.h>

#include "c4p.h"

/* Before ibv_modify_qp(INIT -> RTR, IBV_QP_AV | ...): put the binding's flow label in the GRH. */
static inline c4p_result c4p_fill_rtr_attr(struct ibv_qp_attr *attr, const c4p_binding *b) {
  return c4p_apply_rtr(attr, offsetof(struct ibv_qp_attr, ah_attr.is_global),
                       offsetof(struct ibv_qp_attr, ah_attr.grh.flow_label), b);
}

/* On a live QP in RTS. */
static inline c4p_result c4p_apply_qp(struct ibv_qp *qp, const c4p_binding *b) {
  return c4p_apply_live(qp, b);
}

#endif
