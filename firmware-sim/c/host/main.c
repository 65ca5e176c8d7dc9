/* The C firmware on a POSIX host: the portable core served on a pseudo-terminal.
 *
 *     regdev-firmware-host [--link PATH] [-v]
 *
 * Like `regdev firmware-sim --pty`: the first line of standard output is the port to open
 * (the pty's path, or PATH with --link, a symlink to it), flushed; then it answers requests
 * until interrupted (SIGINT, SIGTERM or SIGHUP: exit 0). -v logs every byte string read and
 * every reply on stderr. When the pty or the link cannot be made, or standard output cannot
 * be written: one line on stderr, exit status 2.
 *
 * It keeps the pty's slave end open itself, so a host may close and reopen the port.
 */
#define _XOPEN_SOURCE 600
#define _DEFAULT_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "regdev_core.h"

static volatile sig_atomic_t stop;
static const char *link_path;

static void on_signal(int number)
{
    (void)number;
    stop = 1;
}

static int fail(const char *what, const char *detail)
{
    fprintf(stderr, "regdev-firmware-host: error: %s: %s\n", what, detail);
    if (link_path)
        unlink(link_path);
    return 2;
}

static void show(const char *arrow, const unsigned char *data, size_t n)
{
    size_t i;
    fputs(arrow, stderr);
    for (i = 0; i < n; i++) {
        if (data[i] >= 0x20 && data[i] < 0x7F && data[i] != '\\')
            fputc(data[i], stderr);
        else
            fprintf(stderr, "\\x%02x", data[i]);
    }
    fputc('\n', stderr);
}

static int write_all(int fd, const unsigned char *data, size_t n)
{
    while (n) {
        ssize_t done = write(fd, data, n);
        if (done < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        data += done;
        n -= (size_t)done;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static regdev_core_t core;
    struct sigaction action;
    struct termios tio;
    const char *slave_path;
    char temporary[4096];
    int verbose = 0, master, slave, i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--link") == 0 && i + 1 < argc) {
            link_path = argv[++i];
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else {
            fprintf(stderr, "usage: regdev-firmware-host [--link PATH] [-v]\n"
                            "regdev-firmware-host: error: unexpected argument `%s`\n", argv[i]);
            return 2;
        }
    }

    master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
        (slave_path = ptsname(master)) == NULL)
        return fail("cannot open a pseudo-terminal", strerror(errno));
    /* Held open for as long as we serve: the master never sees a hang-up when the host
     * closes the port, and the line settings below stay. */
    slave = open(slave_path, O_RDWR | O_NOCTTY);
    if (slave < 0 || tcgetattr(slave, &tio) < 0)
        return fail("cannot open a pseudo-terminal", strerror(errno));
    cfmakeraw(&tio); /* no echo, no CR/LF translation, whoever opens it */
    if (tcsetattr(slave, TCSANOW, &tio) < 0)
        return fail("cannot set the pseudo-terminal raw", strerror(errno));
    if (link_path) {
        if (snprintf(temporary, sizeof temporary, "%s.new", link_path) >= (int)sizeof temporary)
            return fail("cannot make the link", "the path is too long");
        unlink(temporary);
        if (symlink(slave_path, temporary) < 0 || rename(temporary, link_path) < 0) {
            int error = errno;
            link_path = NULL; /* not ours to remove */
            return fail("cannot make the link", strerror(error));
        }
    }

    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal; /* no SA_RESTART: a signal ends the read below */
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGHUP, &action, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (printf("%s\n", link_path ? link_path : slave_path) < 0 || fflush(stdout) != 0)
        return fail("cannot write the port to standard output", strerror(errno));

    regdev_core_init(&core);
    while (!stop) {
        unsigned char buffer[256];
        ssize_t n = read(master, buffer, sizeof buffer);
        ssize_t k;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return fail("cannot read the pseudo-terminal", strerror(errno));
        }
        if (verbose)
            show("<- ", buffer, (size_t)n);
        for (k = 0; k < n; k++) {
            uint8_t length = regdev_core_feed(&core, buffer[k]);
            if (!length)
                continue;
            if (verbose)
                show("-> ", core.reply, length);
            if (write_all(master, core.reply, length) < 0)
                return fail("cannot write the pseudo-terminal", strerror(errno));
        }
    }
    if (link_path)
        unlink(link_path);
    close(slave);
    close(master);
    return 0;
}
