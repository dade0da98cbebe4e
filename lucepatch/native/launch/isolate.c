/* lucepatch-isolate: start one verification run in a private mount namespace.
 *
 *   lucepatch-isolate PROGRAM [ARG...]
 *
 * unshare(CLONE_NEWNS), make every mount private (nothing leaks back to the host), mount a fresh
 * 4 MiB tmpfs on /tmp/vgpulock (HAMi-core's host-wide flock lives there, src/utils.c: parallel runs
 * would serialise or hang on it), switch core dumps off, then exec PROGRAM. One exec instead of
 * unshare(1) + sh + mount(8): the runner starts one of these per run.
 * Exit 125 (before PROGRAM runs) when the namespace or the mount cannot be had; the runner then
 * calls the run invalid, never a pass.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define ISOLATION_FAILED 125
#define LOCK_DIR "/tmp/vgpulock"

static int fail(const char *what) {
    fprintf(stderr, "lucepatch-isolate: %s: %s\n", what, strerror(errno));
    return ISOLATION_FAILED;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lucepatch-isolate PROGRAM [ARG...]\n");
        return ISOLATION_FAILED;
    }
    if (unshare(CLONE_NEWNS) != 0)
        return fail("unshare(CLONE_NEWNS)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return fail("mount --make-rprivate /");
    if (mkdir(LOCK_DIR, 01777) != 0 && errno != EEXIST)
        return fail("mkdir " LOCK_DIR);
    if (mount("lucepatch-vgpulock", LOCK_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=1777") != 0)
        return fail("mount tmpfs on " LOCK_DIR);
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) != 0)
        return fail("setrlimit(RLIMIT_CORE, 0)");
    execv(argv[1], argv + 1);
    return fail(argv[1]);
}
