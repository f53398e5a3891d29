/* The descriptor table (see qpip_preload.h): one byte per descriptor in page-sized chunks,
 * a chunk mapped when a descriptor in it is first marked. A chunk, once there, stays: no
 * reader can ever see freed memory, so reads need no lock and are safe in signal handlers. */
#include <sys/mman.h>

#include "qpip_preload.h"

#define CHUNK_BITS 12
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define CHUNKS (FD_TABLE_MAX / CHUNK_SIZE)

typedef _Atomic unsigned char entry_t;
static _Atomic(entry_t *) chunks[CHUNKS];

static entry_t *chunk_of(int fd, int create)
{
    if (fd < 0 || fd >= FD_TABLE_MAX)
        return NULL;
    unsigned c = (unsigned)fd >> CHUNK_BITS;
    entry_t *p = atomic_load_explicit(&chunks[c], memory_order_acquire);
    if (p || !create)
        return p;
    /* mmap, not malloc: async-signal-safe, and no allocator of the program is involved. */
    void *m = mmap(NULL, CHUNK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    entry_t *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&chunks[c], &expected, (entry_t *)m,
                                                memory_order_acq_rel, memory_order_acquire))
        return (entry_t *)m;
    /* Another thread mapped it first. */
    munmap(m, CHUNK_SIZE);
    return expected;
}

unsigned fdt_get(int fd)
{
    entry_t *p = chunk_of(fd, 0);
    return p ? atomic_load_explicit(&p[fd & (CHUNK_SIZE - 1)], memory_order_relaxed) : 0;
}

void fdt_set(int fd, unsigned bits)
{
    /* Clearing an entry of a chunk that is not there is a no-op: it reads as 0 already. */
    entry_t *p = chunk_of(fd, bits != 0);
    if (p)
        atomic_store_explicit(&p[fd & (CHUNK_SIZE - 1)], (unsigned char)bits, memory_order_relaxed);
}

void fdt_copy(int oldfd, int newfd)
{
    /* The connect-pending bit is the state of one connect call, not of the file. */
    fdt_set(newfd, fdt_get(oldfd) & ~FD_CONNECTING);
}

void fdt_clear_range(unsigned first, unsigned last)
{
    if (last >= FD_TABLE_MAX)
        last = FD_TABLE_MAX - 1;
    for (unsigned fd = first; fd <= last && fd >= first; fd++) {
        entry_t *p = chunk_of((int)fd, 0);
        if (!p) {
            /* Skip the whole absent chunk. */
            fd |= CHUNK_SIZE - 1;
            continue;
        }
        atomic_store_explicit(&p[fd & (CHUNK_SIZE - 1)], 0, memory_order_relaxed);
    }
}
