/* Socket addresses: to the driver's endpoints, out to the caller, and as text for the log
 * (written here rather than with inet_ntop/snprintf, which are not async-signal-safe). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "qpip_preload.h"

int addr_to_endpoint(const struct sockaddr *addr, socklen_t len, struct qpip_endpoint *ep)
{
    memset(ep, 0, sizeof(*ep));
    if (!addr || len < sizeof(sa_family_t))
        return -1;
    if (addr->sa_family == AF_INET) {
        struct sockaddr_in in;
        if (len < sizeof(in))
            return -1;
        memcpy(&in, addr, sizeof(in));
        ep->addr[10] = 0xff;
        ep->addr[11] = 0xff;
        memcpy(&ep->addr[12], &in.sin_addr, 4);
        ep->port = ntohs(in.sin_port);
        return 0;
    }
    if (addr->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        if (len < sizeof(in6))
            return -1;
        memcpy(&in6, addr, sizeof(in6));
        memcpy(ep->addr, &in6.sin6_addr, 16);
        ep->port = ntohs(in6.sin6_port);
        return 0;
    }
    return -1;
}

void addr_copy_out(void *dst, socklen_t *len, const void *src, socklen_t full)
{
    if (!dst || !len)
        return;
    socklen_t n = *len < full ? *len : full;
    memcpy(dst, src, n);
    *len = full;
}

/* ---- text ----------------------------------------------------------------------------- */

struct out {
    char *p;
    size_t n, size;
};
static void put_c(struct out *o, char c)
{
    if (o->n + 1 < o->size)
        o->p[o->n++] = c;
}
static void put_s(struct out *o, const char *s)
{
    while (*s)
        put_c(o, *s++);
}
static void put_u(struct out *o, unsigned long v)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i)
        put_c(o, tmp[--i]);
}
static void put_hex(struct out *o, unsigned v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[8];
    int i = 0;
    do {
        tmp[i++] = digits[v & 15];
        v >>= 4;
    } while (v);
    while (i)
        put_c(o, tmp[--i]);
}
static void put_v4(struct out *o, const unsigned char *a)
{
    for (int i = 0; i < 4; i++) {
        if (i)
            put_c(o, '.');
        put_u(o, a[i]);
    }
}

/* RFC 5952: lower-case hex, no leading zeros, the longest run of two or more zero groups
 * (the first of equals) as "::"; ::ffff:0:0/96 with the IPv4 address dotted. */
static void put_v6(struct out *o, const unsigned char *a)
{
    unsigned g[8];
    for (int i = 0; i < 8; i++)
        g[i] = (unsigned)a[2 * i] << 8 | a[2 * i + 1];
    int mapped = !g[0] && !g[1] && !g[2] && !g[3] && !g[4] && g[5] == 0xffff;
    int groups = mapped ? 6 : 8;
    int best = -1, best_len = 0;
    for (int i = 0; i < groups;) {
        if (g[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j < groups && !g[j])
            j++;
        if (j - i > best_len && j - i >= 2) {
            best = i;
            best_len = j - i;
        }
        i = j;
    }
    for (int i = 0; i < groups; i++) {
        if (i == best) {
            put_s(o, "::");
            i += best_len - 1;
            continue;
        }
        if (i && i != best + best_len)
            put_c(o, ':');
        put_hex(o, g[i]);
    }
    if (mapped) {
        /* "::ffff:" then the dotted quad (best ends at group 5, so "::" is written). */
        put_c(o, ':');
        put_v4(o, a + 12);
    }
}

size_t addr_format(const struct sockaddr *addr, socklen_t len, char *buf, size_t size)
{
    struct out o = { buf, 0, size };
    if (size == 0)
        return 0;
    if (!addr || len < sizeof(sa_family_t)) {
        put_s(&o, "(no address)");
    } else if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;
        memcpy(&in, addr, sizeof(in));
        put_v4(&o, (const unsigned char *)&in.sin_addr);
        put_c(&o, ':');
        put_u(&o, ntohs(in.sin_port));
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof(in6));
        put_c(&o, '[');
        put_v6(&o, (const unsigned char *)&in6.sin6_addr);
        if (in6.sin6_scope_id) {
            put_c(&o, '%');
            put_u(&o, in6.sin6_scope_id);
        }
        put_s(&o, "]:");
        put_u(&o, ntohs(in6.sin6_port));
    } else {
        put_s(&o, "family ");
        put_u(&o, addr->sa_family);
    }
    o.p[o.n] = 0;
    return o.n;
}
