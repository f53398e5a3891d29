/* Helper of test/passthrough.sh: built with _FORTIFY_SOURCE, so its recv and recvfrom are
 * glibc's checked entry points (__recv_chk, __recvfrom_chk), which the preload interposes.
 * `fortify recv|recvfrom N`: receives up to N bytes into an 8-byte buffer from a socket
 * pair holding 16. N <= 8 prints "fortify: ok"; N > 8 must abort ("buffer overflow
 * detected"), as without the preload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int sv[2];
    char buf[8];
    if (argc != 3)
        return 2;
    size_t n = strtoul(argv[2], NULL, 10);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || write(sv[1], "0123456789abcdef", 16) != 16)
        return 2;
    ssize_t r;
    if (strcmp(argv[1], "recv") == 0) {
        r = recv(sv[0], buf, n, 0);
    } else {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        r = recvfrom(sv[0], buf, n, 0, (struct sockaddr *)&ss, &sl);
    }
    if (r != (ssize_t)n)
        return 3;
    printf("fortify: ok\n");
    return 0;
}
