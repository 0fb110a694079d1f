/* h3_file.c - regular files only, paths inside the model folder (h3_file.h). */
#include "base/h3_file.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static h3_status_code open_error(const char *path, int err, h3_status *status) {
    if (err == ENOENT || err == ENOTDIR) return h3_fail(status, H3_ERR_NOT_FOUND, "%s: no such file", path);
    return h3_fail(status, H3_ERR_IO, "%s: %s", path, strerror(err));
}

static const char *kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "directory";
    if (S_ISFIFO(mode)) return "FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "device";
    if (S_ISSOCK(mode)) return "socket";
    return "special file";
}

h3_status_code h3_file_open(const char *path, int *fd, uint64_t *size, h3_status *status) {
    *fd = -1;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return open_error(path, errno, status);
    struct stat st;
    if (fstat(f, &st) != 0) {
        int err = errno;
        close(f);
        return open_error(path, err, status);
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return h3_fail(status, H3_ERR_IO, "%s: not a regular file (a %s)", path, kind_of(st.st_mode));
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(f);
        return open_error(path, err, status);
    }
    *fd = f;
    if (size) *size = (uint64_t)st.st_size;
    return H3_OK;
}

static h3_status_code read_all(int fd, const char *path, char *buf, size_t n, h3_status *status) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, buf + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return h3_fail(status, H3_ERR_IO, "%s: read: %s", path, strerror(errno));
        if (r == 0) return h3_fail(status, H3_ERR_IO, "%s: shrank while being read", path);
        done += (size_t)r;
    }
    return H3_OK;
}

h3_status_code h3_file_read(const char *path, size_t max_bytes, char **out, size_t *len, h3_status *status) {
    *out = NULL;
    int fd;
    uint64_t size;
    h3_status_code rc = h3_file_open(path, &fd, &size, status);
    if (rc != H3_OK) return rc;
    if (size > max_bytes) {
        close(fd);
        return h3_fail(status, H3_ERR_FORMAT, "%s: %llu bytes, more than the %zu this file may have", path,
                       (unsigned long long)size, max_bytes);
    }
    char *buf = g_try_malloc((size_t)size + 1);
    if (!buf) rc = h3_fail(status, H3_ERR_NO_MEMORY, "%s: %llu bytes: out of memory", path, (unsigned long long)size);
    if (rc == H3_OK) rc = read_all(fd, path, buf, (size_t)size, status);
    close(fd);
    if (rc != H3_OK) {
        g_free(buf);
        return rc;
    }
    buf[size] = '\0';
    *out = buf;
    if (len) *len = (size_t)size;
    return H3_OK;
}

h3_status_code h3_path_check_inside(const char *root, const char *path, const char *what, h3_status *status) {
    char *r = realpath(root, NULL);
    if (!r) return open_error(root, errno, status);
    char *p = realpath(path, NULL);
    if (!p) {
        h3_status_code rc = open_error(path, errno, status);
        free(r);
        return rc;
    }
    size_t n = strlen(r);
    /* "/" as root: every absolute path lies below it. */
    int inside = strcmp(p, r) == 0 || (strncmp(p, r, n) == 0 && (p[n] == '/' || (n == 1 && r[0] == '/')));
    h3_status_code rc = inside ? H3_OK
                               : h3_fail(status, H3_ERR_FORMAT,
                                         "%s names '%s', which resolves to '%s', outside the model folder '%s'",
                                         what, path, p, r);
    free(p);
    free(r);
    return rc;
}

h3_status_code h3_path_check_file_name(const char *root, const char *rel, const char *what, h3_status *status) {
    int dotdot = 0;
    char **parts = g_strsplit(rel, "/", -1);
    for (int i = 0; parts[i]; i++) dotdot |= strcmp(parts[i], "..") == 0;
    g_strfreev(parts);
    if (!*rel || g_path_is_absolute(rel) || dotdot)
        return h3_fail(status, H3_ERR_FORMAT, "%s is '%s': a file name inside '%s' is needed (relative, no '..')",
                       what, rel, root);
    char *path = g_build_filename(root, rel, NULL);
    char *folder = g_path_get_dirname(path);
    h3_status_code rc = h3_path_check_inside(root, folder, what, status);
    g_free(folder);
    g_free(path);
    return rc;
}
