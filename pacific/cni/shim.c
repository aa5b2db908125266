/*
 * `pacific`: the CNI plugin's fast path (decision 0044).
 *
 * The runtime executes the plugin once per CNI call; CPython's own start-up
 * (~7 ms) was the largest part of a pod's ADD that was not the daemon's work.
 * This program does no CNI logic at all: it hands the call, as it came (the
 * CNI_* environment and the network configuration on stdin), to pacific-node
 * over its root-only unix socket (POST /exec), and prints what the daemon
 * answers, where pacific.cni.plugin.run ran in-process, exactly as the Python
 * plugin would have run it here.
 *
 * Anything else falls back to the Python plugin, executed with the same stdin
 * and environment: the daemon is not running (the Python plugin then answers
 * STATUS, or tears a DEL down locally), the socket named in the configuration
 * cannot be found by this program's plain scan (escapes, an unusual layout),
 * the daemon does not know /exec (an older daemon), or it answers 409 because
 * the configuration's server_socket is not the socket this program used.
 *
 * Output contract (libcni's): the result or the error JSON on stdout, exit
 * code 0 or 1, logs on stderr.  Built by `make setup` (static, no libc
 * version to match the host's) as pacific/cni/pacific-cni; pacific-node
 * installs it as <bin dir>/pacific and the Python plugin as
 * <bin dir>/pacific.d/pacific-py.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_SOCKET "/run/pacific/cni.sock"   /* pacific.names.CNI_SOCKET */
#define LIBDIR "pacific.d"                      /* pacific.names.CNI_PLUGIN_LIBDIR */
#define PY_PLUGIN "pacific-py"                  /* pacific.names.CNI_PLUGIN_PY */
#define MAX_BODY (1 << 20)                      /* pacific.node.cnirequest.MAX_BODY */
#define PATH_EXEC "/exec"                       /* pacific.cni.plugin.PATH_EXEC */
#define SOCKET_HEADER "X-Pacific-Socket"        /* pacific.cni.plugin.EXEC_SOCKET_HEADER */
#define EXIT_HEADER "X-CNI-Exit"                /* pacific.cni.plugin.EXEC_EXIT_HEADER */
#define LOG_HEADER "X-CNI-Log"                  /* pacific.cni.plugin.EXEC_LOG_HEADER */
#define MAX_STDIN (64 << 20)                    /* read whole, for the fallback's message */
#define ANSWER_TIMEOUT_S 300                    /* > the plugin's default 180 s */

extern char **environ;

struct buf { char *p; size_t n, cap; };

static int put(struct buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 8192;
        while (cap < b->n + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    return 0;
}

static int read_all(int fd, struct buf *b, size_t limit)
{
    char chunk[65536];
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return 0;
        if (b->n + (size_t)r > limit || put(b, chunk, (size_t)r) < 0)
            return -1;
    }
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The Python plugin, with this call's stdin and environment. */
static int fallback(const char *self_dir, const struct buf *in, char **argv)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" LIBDIR "/" PY_PLUGIN, self_dir) >= (int)sizeof path)
        return 1;
    int fd = memfd_create("pacific-cni-stdin", 0);
    if (fd < 0 || write_all(fd, in->p ? in->p : "", in->n) < 0 || lseek(fd, 0, SEEK_SET) < 0
        || dup2(fd, 0) < 0) {
        fprintf(stderr, "pacific-cni: cannot hand stdin to %s: %s\n", path, strerror(errno));
        return 1;
    }
    close(fd);
    argv[0] = path;
    execv(path, argv);
    fprintf(stderr, "pacific-cni: cannot run %s: %s\n", path, strerror(errno));
    printf("{\"cniVersion\":\"1.0.0\",\"code\":100,\"msg\":\"the Pacific CNI plugin is "
           "incompletely installed: %s is missing\"}", path);
    return 1;
}

/* The value of the first "server_socket" key when it is a plain string (no
 * escapes); DEFAULT_SOCKET when the key is absent; NULL when unsure.  The
 * daemon checks the guess against the configuration it parses (409 if not). */
static const char *socket_of(const struct buf *in, char *out, size_t cap)
{
    static const char key[] = "\"server_socket\"";
    const char *end = in->p + in->n;
    const char *k = in->n ? memmem(in->p, in->n, key, sizeof key - 1) : NULL;
    if (!k)
        return DEFAULT_SOCKET;
    const char *p = k + sizeof key - 1;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    if (p >= end || *p++ != ':')
        return NULL;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    if (p >= end || *p++ != '"')
        return NULL;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (!q || memchr(p, '\\', (size_t)(q - p)) || (size_t)(q - p) >= cap || q == p || *p != '/')
        return NULL;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = 0;
    return out;
}

int main(int argc, char **argv)
{
    (void)argc;
    signal(SIGPIPE, SIG_IGN);      /* a daemon that hangs up is an error we report */
    char self[PATH_MAX];
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sn <= 0) {
        fprintf(stderr, "pacific-cni: cannot find my own path: %s\n", strerror(errno));
        return 1;
    }
    self[sn] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = 0;

    struct buf in = {0};
    if (argv[1] || read_all(0, &in, MAX_STDIN) < 0 || in.n > MAX_BODY - 65536)
        return fallback(self, &in, argv);     /* --help, or too big: the plugin's message */

    char sock_buf[sizeof ((struct sockaddr_un *)0)->sun_path];
    const char *sock_path = socket_of(&in, sock_buf, sizeof sock_buf);
    if (!sock_path)
        return fallback(self, &in, argv);

    /* the request: the CNI_* environment, NUL-terminated, an empty entry, then stdin */
    struct buf body = {0};
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "CNI_", 4) && put(&body, *e, strlen(*e) + 1) < 0)
            return fallback(self, &in, argv);
    if (put(&body, "", 1) < 0 || (in.n && put(&body, in.p, in.n) < 0))
        return fallback(self, &in, argv);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, sock_path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
        return fallback(self, &in, argv);     /* daemon down: the Python plugin says so */
    struct timeval tv = {.tv_sec = ANSWER_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    char head[PATH_MAX + 256];
    int hn = snprintf(head, sizeof head, "POST " PATH_EXEC " HTTP/1.0\r\nHost: pacific\r\n"
                      SOCKET_HEADER ": %s\r\nContent-Length: %zu\r\n\r\n", sock_path, body.n);
    if (write_all(fd, head, (size_t)hn) < 0 || write_all(fd, body.p, body.n) < 0)
        return fallback(self, &in, argv);

    struct buf ans = {0};
    if (read_all(fd, &ans, 16 * MAX_BODY) < 0 || put(&ans, "", 1) < 0) {
        /* sent, maybe executed: do not run it twice; answer as the plugin would */
        fprintf(stderr, "pacific-cni: pacific-node at %s did not answer: %s\n", sock_path,
                strerror(errno));
        printf("{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"pacific-node at %s did not "
               "answer\"}", sock_path);
        return 1;
    }
    close(fd);
    /* "HTTP/1.0 200 ...": anything but 200 means the daemon ran nothing */
    if (ans.n < 13 || strncmp(ans.p, "HTTP/1.", 7) || strncmp(ans.p + 8, " 200", 4))
        return fallback(self, &in, argv);
    char *payload = strstr(ans.p, "\r\n\r\n");
    static const char exit_at[] = "\r\n" EXIT_HEADER ": ", log_at[] = "\r\n" LOG_HEADER ": ";
    char *code = strcasestr(ans.p, exit_at);
    if (!payload || !code || code > payload)
        return fallback(self, &in, argv);
    int exit_code = atoi(code + sizeof exit_at - 1);
    char *note = strcasestr(ans.p, log_at);
    if (note && note < payload) {
        note += sizeof log_at - 1;
        fprintf(stderr, "pacific-cni: %.*s\n", (int)(strstr(note, "\r\n") - note), note);
    }
    payload += 4;
    size_t pn = ans.n - 1 - (size_t)(payload - ans.p);
    if (write_all(1, payload, pn) < 0) {
        fprintf(stderr, "pacific-cni: cannot write the answer to stdout: %s\n", strerror(errno));
        return 1;
    }
    return exit_code;
}
