/* The C firmware on a POSIX host: the portable core served on a pseudo-terminal.
 *
 *     regdev-firmware-host [--link PATH] [--state FILE [--id ID]] [-v]
 *
 * Like `regdev firmware-sim --pty`: the first line of standard output is the port to open
 * (the pty's path, or PATH with --link, a symlink to it), flushed; then it answers requests
 * until interrupted (SIGINT, SIGTERM or SIGHUP: exit 0). -v logs every byte string read and
 * every reply on stderr. When the pty, the link or the state file cannot be made (something
 * already at the link's PATH is never replaced, see own_link.h), or standard output cannot be
 * written: one line on stderr, exit status 2.
 *
 * Its identify text ends with "id=ID epoch=BBBBRRRR" (docs/protocol.md): BBBB counts starts,
 * RRRR resets since. --state FILE keeps what the Uno keeps in EEPROM, the id and the start
 * count (one line, "ID COUNT", the count as a decimal 0..65535), so that a restart is a power
 * cycle of the same device: same id, next start count. A new FILE takes --id ID (1..16 of 0-9
 * and A-Z) or 8 random hex digits; an existing one keeps its id (--id, if given, must match).
 * Without --state the id is 8 random hex digits and the start count 1: a new device each run
 * (--id without --state is refused: a fixed id would say the same epochs again after a
 * restart).
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

#include "own_file.h"
#include "own_link.h"
#include "regdev_core.h"

static volatile sig_atomic_t stop;
static const char *link_path;
static const char *state_path;
static char device_id[REGDEV_MAX_ID + 1];
static own_link_t link_made;

static void on_signal(int number)
{
    (void)number;
    stop = 1;
}

static int fail(const char *what, const char *detail)
{
    fprintf(stderr, "regdev-firmware-host: error: %s: %s\n", what, detail);
    own_link_remove(&link_made);
    return 2;
}

/* A device id: 1..16 characters of 0-9 and A-Z. */
static int is_id(const char *text)
{
    size_t n = strspn(text, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ");
    return n >= 1 && n <= REGDEV_MAX_ID && text[n] == 0;
}

/* 8 random upper-case hex digits into device_id; -1 (errno set) when none can be drawn. */
static int draw_id(void)
{
    unsigned char bytes[4];
    FILE *random;
    size_t got;
    errno = 0;
    random = fopen("/dev/urandom", "rb");
    got = random ? fread(bytes, 1, sizeof bytes, random) : 0;
    if (random)
        fclose(random);
    if (got != sizeof bytes) {
        if (!errno)
            errno = EIO;
        return -1;
    }
    snprintf(device_id, sizeof device_id, "%02X%02X%02X%02X", bytes[0], bytes[1], bytes[2],
             bytes[3]);
    return 0;
}

/* Write "ID COUNT" to the state file (through a temporary file of its own and a rename, see
 * own_file.h); -1 with errno set. */
static int save_state(uint16_t starts)
{
    char text[64];
    int size = snprintf(text, sizeof text, "%s %u\n", device_id, (unsigned)starts);
    if (size < 0 || size >= (int)sizeof text) {
        errno = EOVERFLOW;
        return -1;
    }
    return own_file_replace(state_path, text, (size_t)size);
}

/* The core's new start count, when its reset count passed FFFF: kept in the state file, or
 * this device stops (it cannot keep its epochs new). */
uint16_t regdev_core_next_start(uint16_t starts)
{
    starts = (uint16_t)(starts + 1u);
    if (state_path && save_state(starts) < 0) {
        fprintf(stderr, "regdev-firmware-host: error: cannot write the state file %s: %s\n",
                state_path, strerror(errno));
        own_link_remove(&link_made);
        exit(2);
    }
    return starts;
}

/* This start's count: the state file's plus one (1 for a new file), its id into device_id
 * (`wanted`, or the file's, or drawn); -1 and a message in `why` on failure. */
static long load_state(const char *wanted, char *why, size_t size)
{
    FILE *in;
    unsigned long count = 0;
    char text[64], id[REGDEV_MAX_ID + 2], extra;
    if (!state_path) {
        if (draw_id() < 0) {
            snprintf(why, size, "cannot draw an id from /dev/urandom: %s", strerror(errno));
            return -1;
        }
        return 1;
    }
    in = fopen(state_path, "r");
    if (!in && errno != ENOENT) {
        snprintf(why, size, "cannot read the state file %s: %s", state_path, strerror(errno));
        return -1;
    }
    if (in) {
        int fields;
        char *line = fgets(text, sizeof text, in);
        fclose(in);
        fields = line ? sscanf(text, "%17s %lu%c", id, &count, &extra) : 0;
        if (fields != 3 || extra != '\n' || !is_id(id) || count > 0xFFFFu) {
            snprintf(why, size, "the state file %s is not \"ID COUNT\" (an id of 1..16 of "
                     "0-9 and A-Z, a count 0..65535)", state_path);
            return -1;
        }
        if (wanted && strcmp(wanted, id) != 0) {
            snprintf(why, size, "the state file %s is device %s's, not %s", state_path, id,
                     wanted);
            return -1;
        }
        memcpy(device_id, id, strlen(id) + 1);
    } else if (wanted) {
        memcpy(device_id, wanted, strlen(wanted) + 1);
    } else if (draw_id() < 0) {
        snprintf(why, size, "cannot draw an id from /dev/urandom: %s", strerror(errno));
        return -1;
    }
    count = (count + 1u) & 0xFFFFu;
    if (save_state((uint16_t)count) < 0) {
        snprintf(why, size, "cannot write the state file %s: %s", state_path, strerror(errno));
        return -1;
    }
    return (long)count;
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
    char why[4200], what[4200];
    const char *wanted = NULL;
    int verbose = 0, master, slave, i;
    long starts;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--link") == 0 && i + 1 < argc) {
            link_path = argv[++i];
        } else if (strcmp(argv[i], "--state") == 0 && i + 1 < argc) {
            state_path = argv[++i];
        } else if (strcmp(argv[i], "--id") == 0 && i + 1 < argc) {
            wanted = argv[++i];
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else {
            fprintf(stderr, "usage: regdev-firmware-host [--link PATH] [--state FILE [--id ID]] "
                            "[-v]\nregdev-firmware-host: error: unexpected argument `%s`\n",
                    argv[i]);
            return 2;
        }
    }
    if (wanted && !is_id(wanted)) {
        fprintf(stderr, "regdev-firmware-host: error: --id: expected 1..16 characters of 0-9 "
                        "and A-Z, got `%s`\n", wanted);
        return 2;
    }
    if (wanted && !state_path) {
        fprintf(stderr, "regdev-firmware-host: error: --id needs --state FILE (a device that "
                        "keeps its id keeps its start count, or a restart says old epochs "
                        "again)\n");
        return 2;
    }
    starts = load_state(wanted, why, sizeof why);
    if (starts < 0) {
        fprintf(stderr, "regdev-firmware-host: error: %s\n", why);
        return 2;
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
    if (link_path && own_link_make(&link_made, link_path, slave_path, why, sizeof why) < 0) {
        snprintf(what, sizeof what, "cannot make the link %s", link_path);
        return fail(what, why);
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

    regdev_core_init(&core, device_id, (uint16_t)starts);
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
    own_link_remove(&link_made);
    close(slave);
    close(master);
    return 0;
}
