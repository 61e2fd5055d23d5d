/* The binding table: lookups are one hash and a short probe under a read lock. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint32_t mix(uint32_t h, uint32_t v) {
  for (int i = 0; i < 4; i++) {
    h ^= (v >> (8 * i)) & 0xFFu;
    h *= 16777619u;
  }
  return h;
}

static uint32_t key_hash(const char *comm, uint32_t src, uint32_t dst, uint32_t ch, uint32_t qp) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *c = (const unsigned char *)comm; *c; c++) {
    h ^= *c;
    h *= 16777619u;
  }
  return mix(mix(mix(mix(h, src), dst), ch), qp);
}

static int same(const c4p_binding *b, const char *comm, uint32_t src, uint32_t dst, uint32_t ch,
                uint32_t qp) {
  return b->src_rank == src && b->dst_rank == dst && b->channel == ch && b->qp == qp &&
         strcmp(b->communicator, comm) == 0;
}

void c4p_table_free(c4p_table *t) {
  free(t->slots);
  t->slots = NULL;
  t->cap = t->count = 0;
}

c4p_slot *c4p_table_find(const c4p_table *t, const char *comm, uint32_t src, uint32_t dst,
                         uint32_t ch, uint32_t qp) {
  if (t->cap == 0) return NULL;
  uint32_t h = key_hash(comm, src, dst, ch, qp);
  size_t mask = t->cap - 1;
  for (size_t i = h & mask, n = 0; n < t->cap; i = (i + 1) & mask, n++) {
    c4p_slot *s = &t->slots[i];
    if (!s->used) return NULL;
    if (s->hash == h && same(&s->b, comm, src, dst, ch, qp)) return s;
  }
  return NULL;
}

static c4p_slot *place(c4p_table *t, uint32_t h) {
  size_t mask = t->cap - 1;
  size_t i = h & mask;
  while (t->slots[i].used) i = (i + 1) & mask;
  return &t->slots[i];
}

static c4p_result grow(c4p_table *t) {
  size_t cap = t->cap ? t->cap * 2 : 64;
  c4p_slot *old = t->slots;
  size_t old_cap = t->cap;
  c4p_slot *fresh = calloc(cap, sizeof *fresh);
  if (fresh == NULL) return C4P_ENOMEM;
  t->slots = fresh;
  t->cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].used) *place(t, old[i].hash) = old[i];
  free(old);
  return C4P_OK;
}

c4p_result c4p_table_put(c4p_table *t, const c4p_binding *b, uint32_t gen, int *changed) {
  c4p_slot *s = c4p_table_find(t, b->communicator, b->src_rank, b->dst_rank, b->channel, b->qp);
  if (s != NULL) {
    *changed = s->b.udp_sport != b->udp_sport || s->b.flow_label != b->flow_label;
    s->b = *b;
    s->gen = gen;
    return C4P_OK;
  }
  if ((t->count + 1) * 10 > t->cap * 7) {
    c4p_result rc = grow(t);
    if (rc != C4P_OK) return rc;
  }
  uint32_t h = key_hash(b->communicator, b->src_rank, b->dst_rank, b->channel, b->qp);
  s = place(t, h);
  s->b = *b;
  s->hash = h;
  s->gen = gen;
  s->used = 1;
  t->count++;
  *changed = 1;
  return C4P_OK;
}

int c4p_table_remove(c4p_table *t, const char *comm, uint32_t src, uint32_t dst, uint32_t ch,
                     uint32_t qp, c4p_binding *old) {
  c4p_slot *s = c4p_table_find(t, comm, src, dst, ch, qp);
  if (s == NULL) return 0;
  if (old != NULL) *old = s->b;
  size_t mask = t->cap - 1;
  size_t hole = (size_t)(s - t->slots);
  s->used = 0;
  t->count--;
  /* backward shift: move later members of the cluster into the hole when they may */
  for (size_t i = (hole + 1) & mask; t->slots[i].used; i = (i + 1) & mask) {
    size_t home = t->slots[i].hash & mask;
    size_t dist_i = (i - home) & mask, dist_hole = (hole - home) & mask;
    if (dist_hole < dist_i) {
      t->slots[hole] = t->slots[i];
      t->slots[i].used = 0;
      hole = i;
    }
  }
  return 1;
}

c4p_result c4p_list_push(c4p_list *l, const c4p_binding *b) {
  if (l->len == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    c4p_binding *items = realloc(l->items, cap * sizeof *items);
    if (items == NULL) return C4P_ENOMEM;
    l->items = items;
    l->cap = cap;
  }
  l->items[l->len++] = *b;
  return C4P_OK;
}

void c4p_list_free(c4p_list *l) {
  free(l->items);
  l->items = NULL;
  l->len = l->cap = 0;
}
