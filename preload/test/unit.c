/* Unit test of the preload's descriptor table and address code (fdtable.c, addr.c), which
 * need nothing of the device. Run by `make -C preload check`; prints "unit: N checks
 * passed" or the first failure, exit status 1. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qpip_preload.h"

static int checks;

#define CHECK(cond)                                                             \
    do {                                                                        \
        checks++;                                                               \
        if (!(cond)) {                                                          \
            fprintf(stderr, "unit: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static void check_text(const struct sockaddr *sa, socklen_t len, const char *want)
{
    char buf[80];
    size_t n = addr_format(sa, len, buf, sizeof(buf));
    checks++;
    if (strcmp(buf, want) != 0 || n != strlen(want)) {
        fprintf(stderr, "unit: addr_format gave '%s' (%zu), expected '%s'\n", buf, n, want);
        exit(1);
    }
}

static void v6(const char *text, unsigned port, const char *want)
{
    struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
    CHECK(inet_pton(AF_INET6, text, &a.sin6_addr) == 1);
    check_text((struct sockaddr *)&a, sizeof(a), want);
}

static void test_format(void)
{
    struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(5201) };
    inet_pton(AF_INET, "198.18.0.101", &a4.sin_addr);
    check_text((struct sockaddr *)&a4, sizeof(a4), "198.18.0.101:5201");
    check_text((struct sockaddr *)&a4, sizeof(a4) - 1, "family 2");
    check_text(NULL, 0, "(no address)");
    v6("fd51:5050::1", 5201, "[fd51:5050::1]:5201");
    v6("::", 0, "[::]:0");
    v6("::1", 80, "[::1]:80");
    v6("1::", 1, "[1::]:1");
    v6("fd51:5050::1:0:0:fe", 9, "[fd51:5050::1:0:0:fe]:9"); /* the first longest run */
    v6("1:0:0:2:0:0:0:3", 9, "[1:0:0:2::3]:9");               /* the longest run */
    v6("1:2:3:4:5:6:7:0", 9, "[1:2:3:4:5:6:7:0]:9");          /* a single 0 stays */
    v6("::ffff:198.18.0.1", 7, "[::ffff:198.18.0.1]:7");
    v6("2001:DB8:0:0:1:0:0:1", 443, "[2001:db8::1:0:0:1]:443");
    struct sockaddr_in6 s = { .sin6_family = AF_INET6, .sin6_port = htons(22), .sin6_scope_id = 3 };
    inet_pton(AF_INET6, "fe80::1", &s.sin6_addr);
    check_text((struct sockaddr *)&s, sizeof(s), "[fe80::1%3]:22");
    /* A short buffer: truncated, still NUL-terminated. */
    char small[6];
    CHECK(addr_format((struct sockaddr *)&a4, sizeof(a4), small, sizeof(small)) == 5);
    CHECK(strcmp(small, "198.1") == 0);
}

static void test_endpoint(void)
{
    struct qpip_endpoint ep;
    struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(5201) };
    inet_pton(AF_INET, "198.18.0.102", &a4.sin_addr);
    CHECK(addr_to_endpoint((struct sockaddr *)&a4, sizeof(a4), &ep) == 0);
    static const unsigned char mapped[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 102 };
    CHECK(memcmp(ep.addr, mapped, 16) == 0);
    CHECK(ep.port == 5201 && ep.reserved == 0);
    CHECK(addr_to_endpoint((struct sockaddr *)&a4, sizeof(a4) - 1, &ep) == -1);

    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(80) };
    inet_pton(AF_INET6, "fd51:5050::1:2", &a6.sin6_addr);
    CHECK(addr_to_endpoint((struct sockaddr *)&a6, sizeof(a6), &ep) == 0);
    CHECK(memcmp(ep.addr, &a6.sin6_addr, 16) == 0 && ep.port == 80);
    /* Linux takes the RFC 2133 length (no scope id) too; the library leaves those to the
     * kernel, which answers them as always. */
    CHECK(addr_to_endpoint((struct sockaddr *)&a6, 24, &ep) == -1);

    struct sockaddr un = { .sa_family = AF_UNIX };
    CHECK(addr_to_endpoint(&un, sizeof(un), &ep) == -1);
    CHECK(addr_to_endpoint(NULL, 0, &ep) == -1);
}

static void test_copy_out(void)
{
    unsigned char src[28], dst[28];
    memset(src, 0xab, sizeof(src));
    memset(dst, 0, sizeof(dst));
    socklen_t len = 16;
    addr_copy_out(dst, &len, src, 28); /* truncated: 16 bytes, the full length reported */
    CHECK(len == 28 && dst[15] == 0xab && dst[16] == 0);
    len = 100;
    memset(dst, 0, sizeof(dst));
    addr_copy_out(dst, &len, src, 28);
    CHECK(len == 28 && dst[27] == 0xab);
    addr_copy_out(NULL, &len, src, 28); /* nothing to write to: nothing happens */
    addr_copy_out(dst, NULL, src, 28);
}

static void *setter(void *arg)
{
    int base = (int)(intptr_t)arg;
    for (int i = 0; i < 20000; i++)
        fdt_set(base + i * 7, FD_QPIP);
    return NULL;
}

static void test_table(void)
{
    CHECK(fdt_get(5) == 0);
    CHECK(fdt_get(-1) == 0);
    CHECK(fdt_get(FD_TABLE_MAX) == 0);
    fdt_set(FD_TABLE_MAX, FD_QPIP); /* beyond the table: ignored */
    CHECK(fdt_get(FD_TABLE_MAX) == 0);
    fdt_set(5, FD_QPIP | FD_CONNECTING);
    CHECK(fdt_get(5) == (FD_QPIP | FD_CONNECTING));
    fdt_copy(5, 9000); /* another chunk; the connect bit is not copied */
    CHECK(fdt_get(9000) == FD_QPIP);
    fdt_copy(7, 5); /* dup2 of an unknown descriptor onto a marked one */
    CHECK(fdt_get(5) == 0);
    fdt_set(4095, FD_KERNEL_TCP);
    fdt_set(4096, FD_QPIP);
    fdt_set(100000, FD_QPIP);
    fdt_clear_range(4000, 5000);
    CHECK(fdt_get(4095) == 0 && fdt_get(4096) == 0 && fdt_get(9000) == FD_QPIP);
    fdt_clear_range(6000, ~0u); /* closefrom: to the end, absent chunks skipped */
    CHECK(fdt_get(9000) == 0 && fdt_get(100000) == 0);
    fdt_set(FD_TABLE_MAX - 1, FD_QPIP);
    CHECK(fdt_get(FD_TABLE_MAX - 1) == FD_QPIP);
    fdt_clear_range(FD_TABLE_MAX - 1, ~0u);
    CHECK(fdt_get(FD_TABLE_MAX - 1) == 0);

    /* Threads growing the table at once (chunks mapped by one, used by all). */
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, setter, (void *)(intptr_t)(200000 + i));
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    int missing = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 20000; j++)
            missing += fdt_get(200000 + i + j * 7) != FD_QPIP;
    CHECK(missing == 0);
}

int main(void)
{
    test_format();
    test_endpoint();
    test_copy_out();
    test_table();
    printf("unit: %d checks passed\n", checks);
    return 0;
}
