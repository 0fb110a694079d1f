/* h3_fuzz.h - what the libFuzzer harnesses of tests/fuzz share.
 *
 * Every harness turns its input into files in a private temporary
 * directory (h3core reads paths, not memory) and calls one loader. Inputs
 * that stand for several files are split on H3_FUZZ_SEP; a part may begin
 * with its own file name ("name\n" then the bytes, h3_fuzz_named).
 *
 * A crash is: an ASan/UBSan report, a GLib critical (made fatal here: a
 * g_return_if_fail in json-glib means h3core passed it something it should
 * have rejected), an abort, a timeout or an allocation over libFuzzer's
 * -malloc_limit_mb. An error status is the expected outcome of a bad file;
 * each harness reads the message (it must be a terminated string) and
 * goes on. */
#ifndef H3_FUZZ_H
#define H3_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/h3_status.h"

#define H3_FUZZ_SEP "\n--h3-fuzz-part--\n"
#define H3_FUZZ_MAX_PARTS 16

typedef struct h3_fuzz_part {
    const uint8_t *data;
    size_t size;
} h3_fuzz_part;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Splits data on H3_FUZZ_SEP into at most max parts (the last one keeps any
 * further separators). Returns the number of parts, >= 1. The separator is
 * looked for only at newlines (memchr): a memcmp at every byte goes
 * through libFuzzer's memcmp hook and cost a quarter of the run on inputs
 * of 80 KiB; the memcmp at each newline still shows libFuzzer the
 * separator. */
static inline size_t h3_fuzz_split(const uint8_t *data, size_t size, h3_fuzz_part *parts, size_t max) {
    const size_t sl = sizeof H3_FUZZ_SEP - 1;
    size_t n = 0, start = 0;
    for (size_t i = 0; i + sl <= size && n + 1 < max;) {
        const uint8_t *nl = memchr(data + i, '\n', size - sl + 1 - i);
        if (!nl) break;
        i = (size_t)(nl - data);
        if (memcmp(nl, H3_FUZZ_SEP, sl) == 0) {
            parts[n].data = data + start;
            parts[n].size = i - start;
            n++;
            i += sl;
            start = i;
        } else {
            i++;
        }
    }
    parts[n].data = data + start;
    parts[n].size = size - start;
    return n + 1;
}

/* A part "name\nbytes": *name gets a safe file name (letters, digits, '.',
 * '_', '-'; not "." or ".."; at most 100 characters) and *body the bytes.
 * Returns 0 when the part has no such name. */
static inline int h3_fuzz_named(const h3_fuzz_part *p, char name[128], h3_fuzz_part *body) {
    const uint8_t *nl = memchr(p->data, '\n', p->size < 128 ? p->size : 128);
    if (!nl) return 0;
    size_t len = (size_t)(nl - p->data);
    if (len == 0 || len > 100) return 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = p->data[i];
        if (!(g_ascii_isalnum(c) || c == '.' || c == '_' || c == '-')) return 0;
    }
    memcpy(name, p->data, len);
    name[len] = 0;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
    body->data = nl + 1;
    body->size = p->size - len - 1;
    return 1;
}

static char *h3_fuzz_root_dir;

static inline int h3_fuzz_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static inline void h3_fuzz_rm_tree(const char *path) { nftw(path, h3_fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static inline void h3_fuzz_cleanup(void) {
    if (h3_fuzz_root_dir) h3_fuzz_rm_tree(h3_fuzz_root_dir);
}

/* The harness's private directory (under $TMPDIR), removed at exit. */
static inline const char *h3_fuzz_root(void) {
    if (!h3_fuzz_root_dir) {
        GError *err = NULL;
        h3_fuzz_root_dir = g_dir_make_tmp("h3-fuzz-XXXXXX", &err);
        if (!h3_fuzz_root_dir) {
            fprintf(stderr, "h3-fuzz: no temporary directory: %s\n", err->message);
            abort();
        }
        atexit(h3_fuzz_cleanup);
    }
    return h3_fuzz_root_dir;
}

/* root/rel; g_free it. */
static inline char *h3_fuzz_path(const char *rel) { return g_build_filename(h3_fuzz_root(), rel, NULL); }

/* Writes root/rel (parents created) and returns its path; g_free it. */
static inline char *h3_fuzz_write(const char *rel, const void *data, size_t size) {
    char *path = h3_fuzz_path(rel);
    char *dir = g_path_get_dirname(path);
    g_mkdir_with_parents(dir, 0700);
    g_free(dir);
    unlink(path); /* a symlink of the engine harness is replaced, not written through */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "h3-fuzz: %s: %s\n", path, strerror(errno));
        abort();
    }
    const uint8_t *p = data;
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, p + done, size - done);
        if (w <= 0) {
            fprintf(stderr, "h3-fuzz: write %s: %s\n", path, strerror(errno));
            abort();
        }
        done += (size_t)w;
    }
    close(fd);
    return path;
}

static inline void h3_fuzz_remove(const char *rel) {
    char *path = h3_fuzz_path(rel);
    h3_fuzz_rm_tree(path);
    g_free(path);
}

/* An error status must carry a terminated message; reading it all lets
 * ASan see a missing terminator. */
static inline void h3_fuzz_check_status(const h3_status *st) {
    volatile size_t n = strnlen(st->message, sizeof st->message);
    if (n >= sizeof st->message) abort();
}

/* Reads the first and last byte of a range a loader handed out, so that a
 * range outside its mapping faults here rather than in a later user. */
static inline uint8_t h3_fuzz_touch(const void *data, size_t n) {
    if (!n) return 0;
    const volatile uint8_t *p = data;
    return (uint8_t)(p[0] ^ p[n - 1]);
}

/* Common set-up: GLib criticals are crashes; one BLAS thread. */
static inline void h3_fuzz_init(void) {
    g_log_set_always_fatal(G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_ERROR);
    g_setenv("OPENBLAS_NUM_THREADS", "1", FALSE);
    h3_fuzz_root();
}

/* A path from the build (H3_FUZZ_DATA: tests/data; H3_FUZZ_MODEL: the engine
 * harnesses' model, seeds/model), overridable by an environment variable. */
static inline const char *h3_fuzz_setting(const char *env, const char *def) {
    const char *v = getenv(env);
    return v && *v ? v : def;
}

#endif
