/* core/checksum.h: the two digests ignite writes itself: CRC-32C (Castagnoli,
 * reflected, init and final xor 0xffffffff) over saved KV cache files, and
 * SHA-256 (FIPS 180-4) for model identities. Incremental, so a stream can be
 * digested as it passes. Covered by tests/kvcache/test_kvcache.c (published
 * test vectors). */
#ifndef IGNITE_CORE_CHECKSUM_H
#define IGNITE_CORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C: start with crc = 0, feed the bytes in order. */
uint32_t ig_crc32c(uint32_t crc, const void *data, size_t len);

struct ig_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    unsigned char buf[64];
};

void ig_sha256_init(struct ig_sha256 *s);
void ig_sha256_update(struct ig_sha256 *s, const void *data, size_t len);
void ig_sha256_final(struct ig_sha256 *s, unsigned char out[32]);

#endif
