/* The agent's wire format, version 1 (docs/api.md): big-endian integers, u16-prefixed strings.
 * Every read is checked against what is left of the payload; a short read marks the reader bad
 * and returns zeros, so a parser reads on and checks `bad` once at the end. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

c4p_result c4p_parse_header(const uint8_t raw[C4P_WIRE_HEADER], c4p_header *h) {
  if (memcmp(raw, "C4PL", 4) != 0) return C4P_EPROTO;
  h->version = (uint16_t)((raw[4] << 8) | raw[5]);
  h->type = (uint16_t)((raw[6] << 8) | raw[7]);
  h->length = ((uint32_t)raw[8] << 24) | ((uint32_t)raw[9] << 16) | ((uint32_t)raw[10] << 8) |
              (uint32_t)raw[11];
  if (h->length > C4P_WIRE_MAX_PAYLOAD) return C4P_EPROTO;
  return C4P_OK;
}

static const uint8_t *take(c4p_reader *r, size_t n) {
  if (r->bad || n > r->n - r->at) {
    r->bad = 1;
    return NULL;
  }
  const uint8_t *p = r->p + r->at;
  r->at += n;
  return p;
}

uint8_t c4p_rd_u8(c4p_reader *r) {
  const uint8_t *p = take(r, 1);
  return p ? p[0] : 0;
}

uint16_t c4p_rd_u16(c4p_reader *r) {
  const uint8_t *p = take(r, 2);
  return p ? (uint16_t)((p[0] << 8) | p[1]) : 0;
}

uint32_t c4p_rd_u32(c4p_reader *r) {
  const uint8_t *p = take(r, 4);
  return p ? ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3] : 0;
}

uint64_t c4p_rd_u64(c4p_reader *r) {
  uint64_t hi = c4p_rd_u32(r);
  return (hi << 32) | c4p_rd_u32(r);
}

void c4p_rd_str(c4p_reader *r, char *buf, size_t limit) {
  uint16_t n = c4p_rd_u16(r);
  buf[0] = '\0';
  if (n > limit) {
    r->bad = 1;
    return;
  }
  const uint8_t *p = take(r, n);
  if (p == NULL) return;
  if (memchr(p, '\0', n) != NULL) {
    r->bad = 1;
    return;
  }
  memcpy(buf, p, n);
  buf[n] = '\0';
}

uint8_t *c4p_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
  return p + 2;
}

uint8_t *c4p_put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
  return p + 4;
}

c4p_result c4p_encode_hello(int version, const char *job, const char *token, uint8_t **out,
                            size_t *len) {
  size_t lj = strlen(job), lt = strlen(token);
  if (lj > C4P_NAME_MAX || lt > 512) return C4P_EINVAL;
  size_t payload = 2 + lj + 2 + lt;
  uint8_t *buf = malloc(C4P_WIRE_HEADER + payload);
  if (buf == NULL) return C4P_ENOMEM;
  memcpy(buf, "C4PL", 4);
  uint8_t *p = c4p_put_u16(buf + 4, (uint16_t)version);
  p = c4p_put_u16(p, C4P_MSG_HELLO);
  p = c4p_put_u32(p, (uint32_t)payload);
  p = c4p_put_u16(p, (uint16_t)lj);
  memcpy(p, job, lj);
  p = c4p_put_u16(p + lj, (uint16_t)lt);
  memcpy(p, token, lt);
  *out = buf;
  *len = C4P_WIRE_HEADER + payload;
  return C4P_OK;
}

uint8_t *c4p_put_u64(uint8_t *p, uint64_t v) {
  return c4p_put_u32(c4p_put_u32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

uint8_t *c4p_put_header(uint8_t *p, int version, uint16_t type, uint32_t length) {
  memcpy(p, "C4PL", 4);
  return c4p_put_u32(c4p_put_u16(c4p_put_u16(p + 4, (uint16_t)version), type), length);
}
