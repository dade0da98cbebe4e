/* liblp_reporter.so: preloaded next to the library under test (LD_PRELOAD="<lib> <reporter>").
 *
 * Why: a program lucepatch cannot change (a llama.cpp binary, a torch rank it did not start) still
 * has to prove what it ran, and a crash has to say where it crashed. This library
 *   - on a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) writes a `signal` event with the
 *     backtrace of the crashing thread (pc, library, offset, dladdr name; the runner resolves static
 *     functions and file:line with addr2line) and a `loaded` event (when = on-signal), then dies of
 *     the same signal with the default action;
 *   - with LUCEPATCH_REPORT_AT_EXIT=1, writes a `loaded` event (when = at-exit) when the process exits
 *     normally (a library destructor: after main returned or exit() ran, libcuda still mapped).
 * `loaded` = every mapped file whose basename is an LD_PRELOAD entry, and the first mapped
 * libcuda.so*, each with its path (from /proc/self/maps: the kernel's canonical path) and sha256.
 *
 * Events are one JSON object per line, appended with one write(2) each to $LUCEPATCH_EVENTS (the
 * runner's per-run file), so several processes of one run (ranks) can share it.
 * Everything on the signal path is async-signal-safe or nearly so (open/read/write, no stdio, no
 * malloc): backtrace() is primed in the constructor so it does not dlopen libgcc_s at crash time.
 * Never calls dlsym: the interposer under test hooks it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LP_EXPORT __attribute__((visibility("default")))
#define LP_MAX_FRAMES 48
#define LP_MAX_SEEN 32

static char lp_events_path[PATH_MAX];
static volatile sig_atomic_t lp_reporting;

/* ---- a small JSON writer into a static buffer ------------------------------------------------ */
static char lp_buf[1 << 16];
static size_t lp_len;

static void lp_put(const char *s) {
    while (*s && lp_len < sizeof lp_buf - 2)
        lp_buf[lp_len++] = *s++;
}

static void lp_putc(char c) {
    if (lp_len < sizeof lp_buf - 2)
        lp_buf[lp_len++] = c;
}

static void lp_put_str(const char *s) {
    static const char hex[] = "0123456789abcdef";
    lp_putc('"');
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            lp_putc('\\');
            lp_putc((char)c);
        } else if (c < 0x20) {
            lp_put("\\u00");
            lp_putc(hex[c >> 4]);
            lp_putc(hex[c & 15]);
        } else {
            lp_putc((char)c);
        }
    }
    lp_putc('"');
}

static void lp_put_u64(uint64_t v, int base) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % (uint64_t)base];
        v /= (uint64_t)base;
    } while (v && n < (int)sizeof tmp);
    if (base == 16)
        lp_put("\"0x");
    while (n)
        lp_putc(tmp[--n]);
    if (base == 16)
        lp_putc('"');
}

static void lp_put_i64(int64_t v) {
    if (v < 0) {
        lp_putc('-');
        lp_put_u64((uint64_t)(-v), 10);
    } else {
        lp_put_u64((uint64_t)v, 10);
    }
}

static void lp_flush(void) {
    if (!lp_events_path[0])
        return;
    lp_buf[lp_len++] = '\n';
    int fd = open(lp_events_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < lp_len) {
            ssize_t w = write(fd, lp_buf + off, lp_len - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        close(fd);
    }
    lp_len = 0;
}

/* ---- SHA-256 (FIPS 180-4) --------------------------------------------------------------------- */
typedef struct {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t used;
} lp_sha;

static const uint32_t lp_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define LP_ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void lp_sha_block(lp_sha *s, const unsigned char *p) {
    uint32_t w[64], a, b, c, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = LP_ROR(w[i - 15], 7) ^ LP_ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = LP_ROR(w[i - 2], 17) ^ LP_ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (LP_ROR(e, 6) ^ LP_ROR(e, 11) ^ LP_ROR(e, 25)) + ((e & f) ^ (~e & g)) + lp_k[i] + w[i];
        uint32_t t2 = (LP_ROR(a, 2) ^ LP_ROR(a, 13) ^ LP_ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
    s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void lp_sha_update(lp_sha *s, const unsigned char *p, size_t n) {
    s->len += n;
    while (n) {
        size_t take = 64 - s->used < n ? 64 - s->used : n;
        memcpy(s->buf + s->used, p, take);
        s->used += take, p += take, n -= take;
        if (s->used == 64) {
            lp_sha_block(s, s->buf);
            s->used = 0;
        }
    }
}

/* hex = "" when the file cannot be read */
static void lp_sha_file(const char *path, char hex[65]) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    static unsigned char chunk[1 << 16];
    lp_sha s;
    hex[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    memcpy(s.h, iv, sizeof iv);
    s.len = 0, s.used = 0;
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0)
        lp_sha_update(&s, chunk, (size_t)n);
    close(fd);
    uint64_t bits = s.len * 8;
    unsigned char pad = 0x80, zero = 0, lenbe[8];
    lp_sha_update(&s, &pad, 1);
    while (s.used != 56)
        lp_sha_update(&s, &zero, 1);
    for (int i = 0; i < 8; i++)
        lenbe[i] = (unsigned char)(bits >> (56 - 8 * i));
    lp_sha_update(&s, lenbe, 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            hex[8 * i + j] = "0123456789abcdef"[(s.h[i] >> (28 - 4 * j)) & 15];
    hex[64] = 0;
}

/* ---- what is mapped ---------------------------------------------------------------------------- */
static const char *lp_base(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* 1 if `base` is the basename of an LD_PRELOAD entry (split on ':' and ' ', as ld.so does) */
static int lp_in_preload(const char *base) {
    const char *pl = getenv("LD_PRELOAD");
    size_t bl = strlen(base);
    while (pl && *pl) {
        while (*pl == ':' || *pl == ' ')
            pl++;
        const char *end = pl;
        while (*end && *end != ':' && *end != ' ')
            end++;
        const char *b = pl;
        for (const char *q = pl; q < end; q++)
            if (*q == '/')
                b = q + 1;
        if ((size_t)(end - b) == bl && bl && memcmp(b, base, bl) == 0)
            return 1;
        pl = end;
    }
    return 0;
}

static void lp_put_file(const char *path) {
    char hex[65];
    lp_sha_file(path, hex);
    lp_put("{\"path\":");
    lp_put_str(path);
    lp_put(",\"sha256\":");
    lp_put_str(hex);
    lp_putc('}');
}

static void lp_report_loaded(const char *when) {
    static char maps[1 << 18];
    static char seen[LP_MAX_SEEN][PATH_MAX];
    char libcuda[PATH_MAX] = "";
    int nseen = 0, first = 1;
    size_t have = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n;
        while (have < sizeof maps - 1 && (n = read(fd, maps + have, sizeof maps - 1 - have)) > 0)
            have += (size_t)n;
        close(fd);
    }
    maps[have] = 0;
    lp_put("{\"event\":\"loaded\",\"reporter\":\"preload\",\"when\":");
    lp_put_str(when);
    lp_put(",\"pid\":");
    lp_put_i64(getpid());
    lp_put(",\"ppid\":");
    lp_put_i64(getppid());
    lp_put(",\"preload\":[");
    for (char *line = maps; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        char *path = strchr(line, '/');
        if (path && !strstr(path, " (deleted)")) {
            int dup = 0;
            for (int i = 0; i < nseen && !dup; i++)
                dup = strcmp(seen[i], path) == 0;
            const char *base = lp_base(path);
            if (!libcuda[0] && strncmp(base, "libcuda.so", 10) == 0 && strlen(path) < sizeof libcuda)
                memcpy(libcuda, path, strlen(path) + 1);
            if (!dup && nseen < LP_MAX_SEEN && strlen(path) < PATH_MAX && lp_in_preload(base)) {
                memcpy(seen[nseen++], path, strlen(path) + 1);
                if (!first)
                    lp_putc(',');
                lp_put_file(path);
                first = 0;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    lp_put("],\"libcuda\":");
    if (libcuda[0])
        lp_put_file(libcuda);
    else
        lp_put("null");
    lp_putc('}');
    lp_flush();
}

/* ---- fatal signals -------------------------------------------------------------------------- */
static const char *lp_signame(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "SIG?";
    }
}

static const int lp_fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

static void lp_on_signal(int sig, siginfo_t *info, void *uctx) {
    (void)uctx;
    if (!lp_reporting) {
        lp_reporting = 1;
        void *pcs[LP_MAX_FRAMES];
        int n = backtrace(pcs, LP_MAX_FRAMES);
        lp_len = 0;
        lp_put("{\"event\":\"signal\",\"reporter\":\"preload\",\"signal\":");
        lp_put_str(lp_signame(sig));
        lp_put(",\"pid\":");
        lp_put_i64(getpid());
        lp_put(",\"tid\":");
        lp_put_i64((int64_t)syscall(SYS_gettid));
        lp_put(",\"addr\":");
        lp_put_u64((uint64_t)(uintptr_t)(info ? info->si_addr : 0), 16);
        lp_put(",\"frames\":[");
        for (int i = 0; i < n; i++) {
            Dl_info d;
            memset(&d, 0, sizeof d);
            int ok = dladdr(pcs[i], &d);
            if (i)
                lp_putc(',');
            lp_put("{\"pc\":");
            lp_put_u64((uint64_t)(uintptr_t)pcs[i], 16);
            lp_put(",\"lib\":");
            lp_put_str(ok && d.dli_fname ? d.dli_fname : "");
            lp_put(",\"off\":");
            lp_put_u64(ok && d.dli_fbase ? (uint64_t)((uintptr_t)pcs[i] - (uintptr_t)d.dli_fbase) : 0, 16);
            lp_put(",\"fn\":");
            lp_put_str(ok && d.dli_sname ? d.dli_sname : "");
            lp_putc('}');
        }
        lp_put("]}");
        lp_flush();
        lp_report_loaded("on-signal");
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void lp_reporter_init(void) {
    const char *p = getenv("LUCEPATCH_EVENTS");
    if (!p || !*p || strlen(p) >= sizeof lp_events_path)
        return;
    memcpy(lp_events_path, p, strlen(p) + 1);
    void *prime[2];
    backtrace(prime, 2); /* loads libgcc_s now, not inside the signal handler */
    static char altstack[1 << 16];
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    sigaltstack(&ss, NULL); /* the main thread survives a stack overflow; other threads use their own stack */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = lp_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof lp_fatal / sizeof lp_fatal[0]; i++)
        sigaction(lp_fatal[i], &sa, NULL);
}

__attribute__((destructor)) static void lp_reporter_fini(void) {
    const char *at_exit = getenv("LUCEPATCH_REPORT_AT_EXIT");
    if (lp_events_path[0] && at_exit && strcmp(at_exit, "1") == 0 && !lp_reporting)
        lp_report_loaded("at-exit");
}

/* Marks the library so the runner can tell it from the library under test in /proc/self/maps. */
LP_EXPORT const char lucepatch_reporter_version[] = "1";
