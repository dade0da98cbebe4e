/* lucepatch-copy SRC DST: copy one file, then fsync and rename it into place.
 *
 * Built statically into the FROM scratch library image (`lucepatch build hami-core --image`), so the
 * swap DaemonSet's and the verify Jobs' init containers can take the library out of that image: it
 * has no shell and no cp. Writes DST.tmp beside DST first, so a killed copy never leaves a partial
 * DST. Exit 0 copied, 1 I/O error (one line on stderr), 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, const char *path) {
    fprintf(stderr, "lucepatch-copy: %s %s: %s\n", what, path, strerror(errno));
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: lucepatch-copy SRC DST\n");
        return 2;
    }
    const char *src = argv[1], *dst = argv[2];
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", dst) >= (int)sizeof tmp) {
        fprintf(stderr, "lucepatch-copy: destination path too long\n");
        return 2;
    }
    int in = open(src, O_RDONLY);
    if (in < 0) return fail("cannot open", src);
    struct stat st;
    if (fstat(in, &st) != 0) return fail("cannot stat", src);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) return fail("cannot create", tmp);
    char buf[1 << 16];
    ssize_t n;
    off_t total = 0;
    while ((n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail("cannot read", src);
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0) {
                if (errno == EINTR) continue;
                unlink(tmp);
                return fail("cannot write", tmp);
            }
            off += w;
        }
        total += n;
    }
    if (total != st.st_size) {
        unlink(tmp);
        fprintf(stderr, "lucepatch-copy: %s changed while copying\n", src);
        return 1;
    }
    if (fsync(out) != 0 || close(out) != 0) {
        unlink(tmp);
        return fail("cannot flush", tmp);
    }
    close(in);
    if (rename(tmp, dst) != 0) {
        unlink(tmp);
        return fail("cannot rename onto", dst);
    }
    printf("lucepatch-copy: %s -> %s (%lld bytes)\n", src, dst, (long long)total);
    return 0;
}
