/* recovery_child: the recovery bench's child as a static C program (CHILD=c in
 * scripts/bench/recovery.py), the same protocol as its bash script at a fraction of the start cost,
 * so that the figure is mostly the launchers' part, not the children's own start.
 *
 * Reads the round from $OUT/round, appends "ROUND RANK START_US\n" (CLOCK_REALTIME, as bash's
 * EPOCHREALTIME) to $OUT/starts in one write; the victim of round r (rank 1 + r mod (N-1)) waits for
 * $OUT/fault-r, writes its exit time to $OUT/exit-r and exits 1 (FAULT_BY=rule: prints the line a
 * log rule faults on, then waits like the others). Everyone else waits for a signal. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    if (v == NULL) {
        fprintf(stderr, "recovery_child: %s is not set\n", name);
        exit(2);
    }
    return v;
}

int main(void) {
    long long start = now_us();
    const char *out = env("OUT");
    long n = atol(env("N")), rank = atol(env("RANK"));
    char path[4096], line[128];
    snprintf(path, sizeof path, "%s/round", out);
    int fd = open(path, O_RDONLY);
    ssize_t got = fd < 0 ? -1 : read(fd, line, sizeof line - 1);
    if (got <= 0) {
        fprintf(stderr, "recovery_child: cannot read %s\n", path);
        return 2;
    }
    line[got] = '\0';
    close(fd);
    long r = atol(line);
    snprintf(path, sizeof path, "%s/starts", out);
    int len = snprintf(line, sizeof line, "%ld %ld %lld\n", r, rank, start);
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0 || write(fd, line, (size_t)len) != len) {
        fprintf(stderr, "recovery_child: cannot append to %s\n", path);
        return 2;
    }
    close(fd);
    if (n > 1 && rank == 1 + r % (n - 1)) {
        snprintf(path, sizeof path, "%s/fault-%ld", out, r);
        struct timespec tick = {0, 5 * 1000 * 1000};
        while (access(path, F_OK) != 0) nanosleep(&tick, NULL);
        snprintf(path, sizeof path, "%s/exit-%ld", out, r);
        len = snprintf(line, sizeof line, "%lld\n", now_us());
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, line, (size_t)len) != len) return 2;
        close(fd);
        const char *by = getenv("FAULT_BY");
        if (by == NULL || strcmp(by, "rule") != 0) return 1;
        fputs("step failed: FAULT\n", stdout);
        fflush(stdout);
    }
    for (;;) pause();
}
