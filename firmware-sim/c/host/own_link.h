/* The --link PATH symlink of the POSIX programs (the host build, the simavr harness), kept as
 * firmware-sim's Python simulator keeps it: they never delete what they did not create.
 *
 * - The link is made with symlink(2) where nothing is: an existing file, device node,
 *   directory, pipe, socket or symlink (a stale link of an earlier run too) is refused, with
 *   what is there in the message, and left as it was.
 * - The program knows its own link by what it made: the link's device and inode numbers and
 *   its target (its own pty). At exit the link is removed only while it is still that one;
 *   anything put at PATH meanwhile is left alone.
 *
 * Header only (static functions), for the two programs; needs POSIX (lstat, readlink,
 * symlink), which the including file's feature macros ask for.
 */
#ifndef REGDEV_OWN_LINK_H
#define REGDEV_OWN_LINK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct {
    const char *path;   /* PATH */
    const char *target; /* the pty the link points at */
    dev_t dev;          /* the link made here: its device and inode numbers */
    ino_t ino;
    int made;
} own_link_t;

/* What the file of `st` is, in words. */
static const char *own_link_what(const struct stat *st)
{
    if (S_ISLNK(st->st_mode))
        return "a symlink";
    if (S_ISREG(st->st_mode))
        return "a regular file";
    if (S_ISDIR(st->st_mode))
        return "a directory";
    if (S_ISCHR(st->st_mode))
        return "a character device";
    if (S_ISBLK(st->st_mode))
        return "a block device";
    if (S_ISFIFO(st->st_mode))
        return "a named pipe";
    if (S_ISSOCK(st->st_mode))
        return "a socket";
    return "a file";
}

/* Make the link at `path` to `target`. 0, or -1 with the reason (one line, no newline) in
 * `why`: what is already there, or the OS's words. */
static int own_link_make(own_link_t *link, const char *path, const char *target, char *why,
                         size_t size)
{
    struct stat st;
    link->path = path;
    link->target = target;
    link->made = 0;
    if (symlink(target, path) < 0) {
        int error = errno;
        if (error == EEXIST && lstat(path, &st) == 0)
            snprintf(why, size, "%s is already there (the simulator replaces only a link it "
                     "made itself; remove it or choose another path)", own_link_what(&st));
        else
            snprintf(why, size, "%s", strerror(error));
        return -1;
    }
    if (lstat(path, &st) == 0) {
        link->dev = st.st_dev;
        link->ino = st.st_ino;
        link->made = 1;
    }
    return 0;
}

/* Remove the link if PATH is still the one made here; else leave PATH be. */
static void own_link_remove(own_link_t *link)
{
    struct stat st;
    char target[4096];
    ssize_t n;
    if (!link->made)
        return;
    link->made = 0;
    if (lstat(link->path, &st) != 0 || !S_ISLNK(st.st_mode) || st.st_dev != link->dev ||
        st.st_ino != link->ino)
        return;
    n = readlink(link->path, target, sizeof target - 1);
    if (n < 0)
        return;
    target[n] = 0;
    if (strcmp(target, link->target) == 0)
        unlink(link->path);
}

#endif
