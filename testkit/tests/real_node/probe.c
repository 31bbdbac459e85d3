/* The real node's test container: reports who it runs as and whether its root filesystem
 * is writable, says hello to a server of the test on the host, writes its argument as the
 * termination message and exits 3, as a worker that fails does. Compiled static at test time
 * (testkit/tests/real_node.rs), the only file of its image. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    printf("uid=%d gid=%d\n", (int)getuid(), (int)getgid());
    FILE *probe = fopen("/probe-write", "w");
    printf("rootfs-writable=%d\n", probe != NULL);
    if (argc > 3) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in addr = {0};
        addr.sin_family = AF_INET;
        addr.sin_port = htons((unsigned short)atoi(argv[3]));
        inet_pton(AF_INET, argv[2], &addr.sin_addr);
        int ok = s >= 0 && connect(s, (struct sockaddr *)&addr, sizeof addr) == 0 &&
                 write(s, "hello from the pod\n", 19) == 19;
        printf("host-reached=%d\n", ok);
        if (s >= 0) close(s);
    }
    fflush(stdout);
    FILE *log = fopen("/dev/termination-log", "w");
    if (log == NULL) {
        perror("/dev/termination-log");
        return 4;
    }
    fputs(argc > 1 ? argv[1] : "", log);
    fclose(log);
    return 3;
}
