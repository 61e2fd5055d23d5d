/* Applying a binding to a QP, names of results, versions.
 *
 * Why dlopen for mlx5: only mlx5 devices can change a live QP's UDP source port
 * (mlx5dv_modify_qp_udp_sport, rdma-core), and a training process on another NIC must not need
 * libmlx5 to load libc4p. The symbol is looked up once, on first use. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

c4p_result c4p_apply_rtr(void *qp_attr, size_t is_global_offset, size_t flow_label_offset,
                         const c4p_binding *b) {
  if (qp_attr == NULL || b == NULL || b->flow_label > 0xFFFFF) return C4P_EINVAL;
  uint8_t one = 1;
  uint32_t label = b->flow_label;
  memcpy((char *)qp_attr + is_global_offset, &one, sizeof one);
  memcpy((char *)qp_attr + flow_label_offset, &label, sizeof label);
  return C4P_OK;
}

typedef int (*udp_sport_fn)(void *qp, uint16_t sport);
static pthread_once_t mlx5_once = PTHREAD_ONCE_INIT;
static udp_sport_fn mlx5_udp_sport;

static void load_mlx5(void) {
  void *lib = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
  void *sym = dlsym(lib, "mlx5dv_modify_qp_udp_sport");
  memcpy(&mlx5_udp_sport, &sym, sizeof sym); /* object -> function pointer, as POSIX allows */
  /* the library stays loaded for the life of the process: mlx5_udp_sport points into it */
}

c4p_result c4p_apply_live(void *ibv_qp, const c4p_binding *b) {
  if (ibv_qp == NULL || b == NULL || b->udp_sport < 0xC000) return C4P_EINVAL;
  pthread_once(&mlx5_once, load_mlx5);
  if (mlx5_udp_sport == NULL) return C4P_ENOTSUP;
  int rc = mlx5_udp_sport(ibv_qp, b->udp_sport);
  if (rc == 0) return C4P_OK;
  if (rc == EOPNOTSUPP || rc == -EOPNOTSUPP || rc == ENOTSUP) return C4P_ENOTSUP;
  return C4P_EAPPLY;
}

uint16_t c4p_flow_label_to_udp_sport(uint32_t fl) {
  uint32_t low = fl & 0x3FFF, high = fl & 0xFC000;
  low ^= high >> 14;
  return (uint16_t)(low | 0xC000);
}

const char *c4p_strerror(c4p_result code) {
  switch (code) {
    case C4P_OK: return "ok";
    case C4P_ENOTYET: return "no binding for this QP yet (use flow label 0)";
    case C4P_EINVAL: return "invalid argument";
    case C4P_ENOMEM: return "out of memory";
    case C4P_ECONNECT: return "cannot reach the c4p agent's socket";
    case C4P_EAUTH: return "the job token was refused";
    case C4P_EPERM: return "the agent does not admit this process's user or group";
    case C4P_EPROTO: return "malformed or truncated message from the agent";
    case C4P_EVERSION: return "the library and the agent speak different wire versions";
    case C4P_EUNAVAIL: return "the agent cannot check the token now (controller unreachable)";
    case C4P_EMISMATCH: return "the bindings file is for another job, fabric or host";
    case C4P_EFILE: return "the bindings file cannot be read or is malformed";
    case C4P_ENOTSUP: return "not supported on this device (port kept)";
    case C4P_ETIMEOUT: return "the agent did not answer in time";
    case C4P_EPEER: return "the socket is served by a process of another user";
    case C4P_EINTERNAL: return "internal error";
    case C4P_EAPPLY: return "the device refused the port change";
    case C4P_EDROPPED: return "the report ring is full: the sample was dropped";
  }
  return "unknown c4p result";
}

uint32_t c4p_version(void) { return C4P_VERSION; }

const char *c4p_version_string(void) { return "1.0.0"; }

int c4p_wire_version(void) { return C4P_WIRE_VERSION; }
