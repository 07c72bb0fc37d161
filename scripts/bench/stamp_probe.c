/* stamp_probe OUT [HOLD_FIFO COUNT...]: the child for the launch-breakdown and restart benchmarks.
 *
 * Reads CLOCK_MONOTONIC on entry to main and again just before exiting, and appends one line
 * "<restart count> <start ns> <end ns>\n" to OUT ("-" for stdout) in a single write, so lines from
 * successive children never interleave. The restart count is RANKVISOR_RESTART_COUNT (-1 if unset).
 *
 * When the restart count is one of the COUNTs, it first writes "hold <count> <pid>\n" to HOLD_FIFO
 * and waits for SIGUSR1: the driver samples the supervisor (open fds, RSS) while this child runs. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void hold(const char *fifo, long count) {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    /* Blocked before announcing, so a SIGUSR1 sent right after the announcement is not lost. */
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    int fd = open(fifo, O_WRONLY | O_CLOEXEC);
    if (fd < 0) exit(3);
    char msg[64];
    int n = snprintf(msg, sizeof msg, "hold %ld %d\n", count, (int)getpid());
    if (n <= 0 || write(fd, msg, (size_t)n) != n) exit(4);
    close(fd);
    int sig = 0;
    sigwait(&usr1, &sig);
}

int main(int argc, char **argv) {
    uint64_t start = now_ns();
    if (argc < 2) {
        fputs("usage: stamp_probe OUT [HOLD_FIFO COUNT...]\n", stderr);
        return 2;
    }
    const char *env = getenv("RANKVISOR_RESTART_COUNT");
    long count = env ? strtol(env, NULL, 10) : -1;
    for (int i = 3; i < argc; i++) {
        if (strtol(argv[i], NULL, 10) == count) hold(argv[2], count);
    }
    int fd = strcmp(argv[1], "-") == 0 ? 1 : open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return 5;
    char line[96];
    uint64_t end = now_ns();
    int n = snprintf(line, sizeof line, "%ld %llu %llu\n", count, (unsigned long long)start, (unsigned long long)end);
    if (n <= 0 || write(fd, line, (size_t)n) != n) return 6;
    return 0;
}
