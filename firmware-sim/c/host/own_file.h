/* Replace a file's content as a whole, for the POSIX programs (the host build's --state FILE,
 * the simavr harness's --eeprom FILE): a reader sees the old content or the new, never half.
 *
 * - The new content goes to a temporary file that mkstemp(3) makes in FILE's folder (FILE.
 *   followed by six random characters, created with O_EXCL: it never opens a file that is
 *   already there, so no file of the user's, FILE.new or any other, is written over), and
 *   is then renamed over FILE.
 * - The only file ever removed is that temporary one, made by this call, when writing it
 *   failed.
 * - The file gets the mode a plain fopen(3) would give a new one (0666 less the umask), not
 *   mkstemp's 0600.
 *
 * Header only (static functions), for the two programs; needs POSIX (mkstemp, fchmod,
 * umask), which the including file's feature macros ask for.
 */
#ifndef REGDEV_OWN_FILE_H
#define REGDEV_OWN_FILE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Write `size` bytes of `data` to `path` through a temporary file and a rename. 0, or -1
 * with errno set (the temporary file removed, `path` as it was). */
static int own_file_replace(const char *path, const void *data, size_t size)
{
    static const char suffix[] = ".XXXXXX";
    char temporary[4096];
    const unsigned char *next = data;
    size_t left = size;
    mode_t mask;
    int fd, error;
    if (strlen(path) + sizeof suffix > sizeof temporary) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(temporary, sizeof temporary, "%s%s", path, suffix);
    fd = mkstemp(temporary);
    if (fd < 0)
        return -1;
    mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) < 0)
        goto failed;
    while (left > 0) {
        ssize_t done = write(fd, next, left);
        if (done < 0) {
            if (errno == EINTR)
                continue;
            goto failed;
        }
        next += done;
        left -= (size_t)done;
    }
    if (close(fd) < 0) {
        fd = -1;
        goto failed;
    }
    fd = -1;
    if (rename(temporary, path) < 0)
        goto failed;
    return 0;
failed:
    error = errno;
    if (fd >= 0)
        close(fd);
    unlink(temporary); /* made by mkstemp above: ours */
    errno = error;
    return -1;
}

#endif
