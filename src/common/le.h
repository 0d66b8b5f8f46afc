/* The one little-endian codec of the library: every wire format (the
 * descriptor, the transport's frames) reads and writes its fields with
 * these, byte by byte, so that no alignment or host byte order matters. */
#ifndef VMMIPC_COMMON_LE_H
#define VMMIPC_COMMON_LE_H

#include <stdint.h>

static inline void vmmipc__put16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static inline void vmmipc__put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void vmmipc__put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint16_t vmmipc__get16(const unsigned char *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }
static inline uint32_t vmmipc__get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t vmmipc__get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

#endif
