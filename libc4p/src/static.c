/* Static mode: a per-host bindings file written by `c4p plan ... --bindings-dir DIR`.
 *
 * Why a line-oriented text file: an offline site copies one small file per host next to the
 * job; it is read once at open with nothing but stdio, is diffable, and every line is checked
 * (ranges, the kernel's flow-label -> port mapping) so a hand-edited or truncated file is
 * refused with its line number instead of giving wrong ports. The format is in docs/api.md.
 * The header comes first and once: a header line after a binding (the bindings read so far
 * would carry the older epoch) or twice (which one holds?) is refused, and so is a second line
 * for the same QP (one of the two ports would be silently dropped). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define LINE_MAX_BYTES 512

static int parse_u64(const char *text, uint64_t max, uint64_t *out) {
  if (text == NULL || *text == '\0') return 0;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || v > max) return 0;
  *out = v;
  return 1;
}

static c4p_result bad_line(c4p_session *s, const char *path, int line, const char *why) {
  c4p_log(s, C4P_LOG_ERROR, "c4p: %s:%d: %s", path, line, why);
  return C4P_EFILE;
}

c4p_result c4p_open_static(c4p_session *s, const c4p_options *o) {
  const char *path = o->bindings_file;
  if (o->fabric == NULL || o->fabric[0] == '\0') return C4P_EINVAL;
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    c4p_log(s, C4P_LOG_ERROR, "c4p: cannot open %s: %s", path, strerror(errno));
    return C4P_EFILE;
  }
  char line[LINE_MAX_BYTES];
  char fabric[C4P_NAME_MAX + 1] = "", job[C4P_NAME_MAX + 1] = "", host[C4P_NAME_MAX + 1] = "";
  int n = 0, magic = 0, has_epoch = 0, has_count = 0, first_b = 0;
  uint64_t expected = 0, seen = 0;
  c4p_result rc = C4P_OK;
  while (rc == C4P_OK && fgets(line, sizeof line, f) != NULL) {
    n++;
    size_t len = strlen(line);
    if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
    else if (!feof(f)) {
      rc = bad_line(s, path, n, "line too long");
      break;
    }
    char *save = NULL;
    char *word = strtok_r(line, " \t", &save);
    if (word == NULL || word[0] == '#') continue;
    char *args[8];
    int argc = 0;
    for (char *a; argc < 8 && (a = strtok_r(NULL, " \t", &save)) != NULL;) args[argc++] = a;
    if (strtok_r(NULL, " \t", &save) != NULL) {
      rc = bad_line(s, path, n, "too many fields");
      break;
    }
    if (!magic) {
      if (strcmp(word, "c4p-bindings") != 0 || argc != 1) {
        rc = bad_line(s, path, n, "not a c4p bindings file (expected 'c4p-bindings 1')");
      } else if (strcmp(args[0], "1") != 0) {
        rc = bad_line(s, path, n, "unsupported bindings file version (this library reads 1)");
      }
      magic = 1;
      continue;
    }
    char *target = strcmp(word, "fabric") == 0 ? fabric
                   : strcmp(word, "job") == 0  ? job
                   : strcmp(word, "host") == 0 ? host
                                               : NULL;
    int is_number = strcmp(word, "epoch") == 0 || strcmp(word, "count") == 0;
    if ((target != NULL || is_number) && first_b != 0) {
      char why[96];
      snprintf(why, sizeof why, "header line '%s' after the bindings (line %d): move it up",
               word, first_b);
      rc = bad_line(s, path, n, why);
      break;
    }
    if ((target != NULL && target[0] != '\0') || (word[0] == 'e' && is_number && has_epoch) ||
        (word[0] == 'c' && is_number && has_count)) {
      char why[64];
      snprintf(why, sizeof why, "repeats the header line '%s'", word);
      rc = bad_line(s, path, n, why);
      break;
    }
    if (target != NULL) {
      if (argc != 1 || strlen(args[0]) > C4P_NAME_MAX || args[0][0] == '\0')
        rc = bad_line(s, path, n, "bad name");
      else strcpy(target, args[0]);
    } else if (is_number) {
      uint64_t v = 0;
      if (argc != 1 || !parse_u64(args[0], UINT64_MAX, &v)) {
        rc = bad_line(s, path, n, "bad number");
      } else if (word[0] == 'e') {
        s->epoch = v;
        has_epoch = 1;
      } else {
        expected = v;
        has_count = 1;
      }
    } else if (strcmp(word, "b") == 0) {
      /* b communicator src_rank dst_rank channel qp udp_sport flow_label */
      c4p_binding b;
      memset(&b, 0, sizeof b);
      uint64_t v[6];
      int ok = argc == 7 && strlen(args[0]) <= C4P_NAME_MAX;
      for (int i = 0; ok && i < 6; i++) ok = parse_u64(args[1 + i], UINT32_MAX, &v[i]);
      if (!ok) {
        rc = bad_line(s, path, n, "expected 'b communicator src dst channel qp sport label'");
        break;
      }
      if (v[4] < 0xC000 || v[4] > 0xFFFF || v[5] > 0xFFFFF ||
          c4p_flow_label_to_udp_sport((uint32_t)v[5]) != v[4]) {
        rc = bad_line(s, path, n, "udp_sport is not the port the flow label yields");
        break;
      }
      strcpy(b.communicator, args[0]);
      b.src_rank = (uint32_t)v[0];
      b.dst_rank = (uint32_t)v[1];
      b.channel = (uint32_t)v[2];
      b.qp = (uint32_t)v[3];
      b.udp_sport = (uint16_t)v[4];
      b.flow_label = (uint32_t)v[5];
      b.epoch = s->epoch;
      if (first_b == 0) first_b = n;
      const c4p_slot *dup = c4p_table_find(&s->table, b.communicator, b.src_rank, b.dst_rank,
                                           b.channel, b.qp);
      if (dup != NULL) {
        char why[96];
        snprintf(why, sizeof why, "repeats the binding of line %" PRIu32 " (one line per QP)",
                 dup->gen);
        rc = bad_line(s, path, n, why);
        break;
      }
      int fresh = 0;
      rc = c4p_table_put(&s->table, &b, (uint32_t)n, &fresh); /* gen: the line, for the above */
      seen++;
    } else {
      rc = bad_line(s, path, n, "unknown line");
    }
  }
  if (rc == C4P_OK && ferror(f)) rc = bad_line(s, path, n, "read error");
  fclose(f);
  if (rc != C4P_OK) return rc;
  if (!magic || !has_epoch || !has_count || fabric[0] == '\0' || job[0] == '\0' ||
      host[0] == '\0')
    return bad_line(s, path, n,
                    "missing one of the header lines (c4p-bindings, fabric, job, host, epoch, count)");
  if (expected != seen) return bad_line(s, path, n, "truncated: 'count' does not match the bindings");
  if (strcmp(fabric, o->fabric) != 0) {
    c4p_log(s, C4P_LOG_ERROR, "c4p: %s is for fabric %s, not %s", path, fabric, o->fabric);
    return C4P_EMISMATCH;
  }
  if (strcmp(job, o->job_id) != 0) {
    c4p_log(s, C4P_LOG_ERROR, "c4p: %s is for job %s, not %s", path, job, o->job_id);
    return C4P_EMISMATCH;
  }
  if (o->host != NULL && strcmp(host, o->host) != 0) {
    c4p_log(s, C4P_LOG_ERROR, "c4p: %s is for host %s, not %s", path, host, o->host);
    return C4P_EMISMATCH;
  }
  s->is_static = 1;
  c4p_log(s, C4P_LOG_INFO, "c4p: %" PRIu64 " bindings from %s", seen, path);
  return C4P_OK;
}
