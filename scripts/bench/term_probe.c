/* term_probe FIFO: the child for the TERM-latency benchmark.
 *
 * Installs a SIGTERM handler, writes "ready\n" to FIFO, then waits. The handler reads
 * CLOCK_MONOTONIC first thing, writes the nanoseconds as one line to FIFO and exits 0, so the
 * figure the bench driver computes (handler time - time it sent TERM) is the delivery delay through
 * the supervisor, not the probe's own work. Only async-signal-safe calls run in the handler. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int out_fd = -1;

/* Decimal digits of v followed by '\n' into buf; returns the length (snprintf is not signal-safe). */
static size_t u64_line(uint64_t v, char *buf) {
    char tmp[24];
    size_t n = 0, len = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0) buf[len++] = tmp[--n];
    buf[len++] = '\n';
    return len;
}

static void on_term(int sig) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    (void)sig;
    char buf[32];
    size_t len = u64_line((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, buf);
    ssize_t w = write(out_fd, buf, len);
    (void)w;
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        static const char usage[] = "usage: term_probe FIFO\n";
        ssize_t w = write(2, usage, sizeof usage - 1);
        (void)w;
        return 2;
    }
    out_fd = open(argv[1], O_WRONLY | O_CLOEXEC);
    if (out_fd < 0) return 3;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0) return 4;
    /* The supervisor restored our mask; unblock TERM anyway so a bad supervisor shows as a timeout. */
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &term, NULL);
    if (write(out_fd, "ready\n", 6) != 6) return 5;
    for (;;) pause();
}
