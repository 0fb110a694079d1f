/* h3_image_file.c - keyframe files through GdkPixbuf (h3_image_file.h). */
#include "h3_image_file.h"

#include <errno.h>
#include <fcntl.h>
#include <gdk-pixbuf/gdk-pixbuf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole file, opened without blocking (a FIFO would wait for a writer)
 * and refused unless regular and at most H3_IMAGE_FILE_MAX_BYTES. */
static h3_status_code read_file(const char *path, uint8_t **out, size_t *n, h3_status *status) {
    *out = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return h3_fail(status, errno == ENOENT ? H3_ERR_NOT_FOUND : H3_ERR_IO, "image '%s': %s", path,
                       strerror(errno));
    struct stat sb;
    h3_status_code rc = H3_OK;
    if (fstat(fd, &sb) != 0) rc = h3_fail(status, H3_ERR_IO, "image '%s': %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = h3_fail(status, H3_ERR_IO, "image '%s' is not a regular file", path);
    else if ((uint64_t)sb.st_size > H3_IMAGE_FILE_MAX_BYTES)
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "image '%s' is %lld bytes: at most %zu", path,
                     (long long)sb.st_size, H3_IMAGE_FILE_MAX_BYTES);
    uint8_t *buf = rc == H3_OK ? malloc((size_t)sb.st_size + 1) : NULL;
    if (rc == H3_OK && !buf) rc = h3_fail(status, H3_ERR_NO_MEMORY, "image '%s': out of memory", path);
    size_t got = 0;
    while (rc == H3_OK && got < (size_t)sb.st_size) {
        ssize_t k = read(fd, buf + got, (size_t)sb.st_size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) rc = h3_fail(status, H3_ERR_IO, "image '%s': read failed after %zu bytes: %s", path, got,
                                 k < 0 ? strerror(errno) : "unexpected end of file");
        else got += (size_t)k;
    }
    close(fd);
    if (rc != H3_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    *n = got;
    return H3_OK;
}

/* The most pixels a keyframe file may announce. The fuzz harness compiles
 * this file with a smaller cap (tests/fuzz/meson.build): a few hundred bytes
 * of JPEG can announce any size within the limit, and the system's libjpeg
 * then spends up to seconds making the pixels up, time the fuzzer would not
 * spend on our code. The check is the same comparison either way. */
#ifndef H3_IMAGE_FILE_MAX_PIXELS
#define H3_IMAGE_FILE_MAX_PIXELS H3_MAX_IMAGE_PIXELS
#endif

/* The size the header announces, checked before GdkPixbuf allocates it. A
 * refused size is set to 0x0, which makes the loader stop at once with an
 * error (as gdk_pixbuf_get_file_info does), and is said after. (1x1 would
 * not: libjpeg scales by 1/8 at most, so a 241-byte JPEG announcing
 * 22644x29765 was still decoded to 2830x3720 pixels, 0.3 s, before being
 * refused.) */
typedef struct announced {
    int width, height, refused;
} announced;

static void on_size(GdkPixbufLoader *loader, int width, int height, gpointer user) {
    announced *a = user;
    a->width = width;
    a->height = height;
    if (width < 1 || height < 1 || width > H3_MAX_IMAGE_SIDE || height > H3_MAX_IMAGE_SIDE ||
        (int64_t)width * height > H3_IMAGE_FILE_MAX_PIXELS) {
        a->refused = 1;
        gdk_pixbuf_loader_set_size(loader, 0, 0);
    }
}

static h3_status_code size_error(const char *name, const announced *a, h3_status *status) {
    if (a->width < 1 || a->height < 1)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "image '%s' is %dx%d: it has no pixels", name, a->width,
                       a->height);
    return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                   "image '%s' is %dx%d: at most %d pixels a side and %lld in all", name, a->width, a->height,
                   H3_MAX_IMAGE_SIDE, (long long)H3_IMAGE_FILE_MAX_PIXELS);
}

/* Packed RGB from a pixbuf of 8-bit RGB or RGBA (alpha dropped). */
static h3_status_code to_rgb(const char *name, GdkPixbuf *pb, h3_image_file *out, h3_status *status) {
    int w = gdk_pixbuf_get_width(pb), h = gdk_pixbuf_get_height(pb), nc = gdk_pixbuf_get_n_channels(pb);
    if (gdk_pixbuf_get_colorspace(pb) != GDK_COLORSPACE_RGB || gdk_pixbuf_get_bits_per_sample(pb) != 8 ||
        (nc != 3 && nc != 4))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "image '%s': %d channels of %d bits: only 8-bit RGB or RGBA", name,
                       nc, gdk_pixbuf_get_bits_per_sample(pb));
    size_t stride = (size_t)w * 3;
    out->pixels = malloc(stride * (size_t)h + 1);
    if (!out->pixels) return h3_fail(status, H3_ERR_NO_MEMORY, "image '%s': out of memory", name);
    const guint8 *src = gdk_pixbuf_read_pixels(pb);
    int row = gdk_pixbuf_get_rowstride(pb);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            memcpy(out->pixels + (size_t)y * stride + (size_t)x * 3, src + (size_t)y * row + (size_t)x * nc, 3);
    out->image = (h3_image){w, h, stride, out->pixels};
    return H3_OK;
}

/* GdkPixbuf's PNG loader accepts a PNG cut short (the missing rows left
 * blank): a PNG must reach its IEND chunk. Walks the chunks from the
 * signature; 0 when the file ends first. */
static int png_complete(const uint8_t *b, size_t n) {
    size_t off = 8;
    while (n - off >= 12) {
        size_t len = (size_t)b[off] << 24 | (size_t)b[off + 1] << 16 | (size_t)b[off + 2] << 8 | b[off + 3];
        if (memcmp(b + off + 4, "IEND", 4) == 0) return 1;
        if (len > n - off - 12) return 0;
        off += 12 + len;
    }
    return 0;
}

/* JPEG files the system's libjpeg may spend minutes on, refused before it
 * sees them, by a walk over the markers as libjpeg reads them (jdmarker.c's
 * next_marker: bytes before a 0xFF are skipped, fill 0xFF bytes too, 0xFF00
 * is data; after SOS the entropy-coded data runs to the next marker that is
 * not a restart marker):
 * - arithmetic coding (SOF9-11, SOF13-15, DAC): Debian 12's libjpeg-turbo
 *   2.1.5 spins in its arithmetic decoder on some damaged data (the fuzzer's
 *   178-byte files ran for minutes, in tests/fuzz/regressions/image_file/).
 *   Such JPEGs are rare (web browsers do not decode them either);
 * - more than H3_JPEG_MAX_SCANS scans: a progressive JPEG has about ten, and
 *   every scan passes over the whole image, so a small file of thousands of
 *   empty scans multiplies the decoding time of a large image; libjpeg
 *   leaves such a limit to the caller.
 * A file cut short ends the walk: GdkPixbuf then says what is wrong. */
#define H3_JPEG_MAX_SCANS 1000

/* The offset of the next marker's code at or after off (0 when none):
 * skips to a 0xFF, then past fill 0xFF bytes; a zero after them is stuffed
 * data, and so in entropy-coded data (in_scan) is a restart marker. */
static size_t jpeg_next_marker(const uint8_t *b, size_t n, size_t off, int in_scan) {
    while (off < n) {
        while (off < n && b[off] != 0xff) off++;
        while (off < n && b[off] == 0xff) off++;
        if (off >= n) return 0;
        uint8_t m = b[off];
        if (m != 0x00 && !(in_scan && m >= 0xd0 && m <= 0xd7)) return off;
        off++;
    }
    return 0;
}

static h3_status_code jpeg_check(const uint8_t *b, size_t n, const char *name, h3_status *status) {
    size_t off = 2; /* past SOI */
    int scans = 0;
    while ((off = jpeg_next_marker(b, n, off, 0)) != 0) {
        uint8_t m = b[off++];
        if (m == 0xd9) break;                                 /* EOI */
        if (m == 0x01 || (m >= 0xd0 && m <= 0xd8)) continue; /* TEM, RSTn, SOI: no length */
        if (n - off < 2) break;
        size_t len = (size_t)b[off] << 8 | b[off + 1];
        if ((m >= 0xc9 && m <= 0xcb) || (m >= 0xcd && m <= 0xcf) || m == 0xcc)
            return h3_fail(status, H3_ERR_UNSUPPORTED,
                           "image '%s' is an arithmetic-coded JPEG (marker 0xFF%02X): not read, since the system's "
                           "libjpeg can hang on a damaged one; save it as a baseline or progressive JPEG, or as PNG",
                           name, m);
        if (len < 2 || len > n - off) break;
        off += len;
        if (m == 0xda) {
            if (++scans > H3_JPEG_MAX_SCANS)
                return h3_fail(status, H3_ERR_FORMAT,
                               "image '%s' is a JPEG of more than %d scans (a progressive one has about ten): not read, "
                               "each scan costs a pass over the whole image",
                               name, H3_JPEG_MAX_SCANS);
            size_t next = jpeg_next_marker(b, n, off, 1);
            if (next == 0) break;
            off = next - 1; /* the 0xFF before it, where the outer loop looks */
        }
    }
    return H3_OK;
}

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* What a file that is neither PNG nor JPEG looks like, for the message
 * (with its article). */
static const char *other_format(const uint8_t *b, size_t n) {
    if (n >= 2 && memcmp(b, "BM", 2) == 0) return "a BMP";
    if (n >= 4 && memcmp(b, "GIF8", 4) == 0) return "a GIF";
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return "a WebP";
    if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) return "a TIFF";
    if (n >= 4 && memcmp(b, "\0\0\1\0", 4) == 0) return "an ICO";
    if (n >= 12 && memcmp(b + 4, "ftyp", 4) == 0) return "an ISO media (HEIF, AVIF, MP4)";
    return NULL;
}

/* The GdkPixbuf loader type for the file, from its first bytes: only the
 * PNG and JPEG loaders are used. GdkPixbuf would otherwise pick any of its
 * loaders (BMP, ICO, TGA, XPM, ...) from the content, and some of them
 * allocate what the header says before reporting a size: the fuzzer's
 * 78-byte BMP made Debian 12's BMP loader ask for 3.2 GB
 * (tests/fuzz/regressions/image_file/). PNG and JPEG are what the docs
 * promise, and the two whose headers are checked here and in on_size. */
static h3_status_code loader_type(const uint8_t *b, size_t n, const char *name, const char **type,
                                  h3_status *status) {
    *type = NULL;
    if (n >= 8 && memcmp(b, png_signature, 8) == 0) *type = "png";
    else if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) *type = "jpeg";
    if (*type) return H3_OK;
    const char *other = other_format(b, n);
    if (other)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "image '%s' cannot be decoded: it is %s file, and only PNG and JPEG are read; convert it to PNG",
                       name, other);
    return h3_fail(status, H3_ERR_FORMAT,
                   "image '%s' cannot be decoded: it is not a PNG or JPEG file (no PNG signature, no JPEG "
                   "start-of-image marker)",
                   name);
}

h3_status_code h3_image_file_decode(const uint8_t *bytes, size_t n, const char *name, h3_image_file *out,
                                    h3_status *status) {
    memset(out, 0, sizeof *out);
    if (n == 0) return h3_fail(status, H3_ERR_FORMAT, "image '%s' is empty", name);
    const char *type;
    h3_status_code rc = loader_type(bytes, n, name, &type, status);
    if (rc != H3_OK) return rc;
    int png = strcmp(type, "png") == 0;
    if (!png && (rc = jpeg_check(bytes, n, name, status)) != H3_OK) return rc;
    GError *err = NULL;
    GdkPixbufLoader *loader = gdk_pixbuf_loader_new_with_type(type, &err);
    if (!loader) {
        rc = h3_fail(status, H3_ERR_UNSUPPORTED, "image '%s': the system's GdkPixbuf has no %s loader: %s", name,
                     type, err ? err->message : "unknown error");
        if (err) g_error_free(err);
        return rc;
    }
    announced a = {0, 0, 0};
    g_signal_connect(loader, "size-prepared", G_CALLBACK(on_size), &a);
    gboolean ok = gdk_pixbuf_loader_write(loader, bytes, n, &err);
    if (ok) ok = gdk_pixbuf_loader_close(loader, &err);
    else gdk_pixbuf_loader_close(loader, NULL);
    GdkPixbuf *pb = ok ? gdk_pixbuf_loader_get_pixbuf(loader) : NULL;
    if (a.refused) rc = size_error(name, &a, status);
    else if (!ok || !pb)
        rc = h3_fail(status, H3_ERR_FORMAT, "image '%s' cannot be decoded as %s: %s", name, png ? "PNG" : "JPEG",
                     err ? err->message : "no image");
    else if (png && !png_complete(bytes, n))
        rc = h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated PNG: %zu bytes and no IEND chunk", name, n);
    else rc = to_rgb(name, pb, out, status);
    if (err) g_error_free(err);
    g_object_unref(loader);
    if (rc != H3_OK) h3_image_file_clear(out);
    return rc;
}

h3_status_code h3_image_file_load(const char *path, h3_image_file *out, h3_status *status) {
    memset(out, 0, sizeof *out);
    uint8_t *bytes;
    size_t n;
    h3_status_code rc = read_file(path, &bytes, &n, status);
    if (rc == H3_OK) rc = h3_image_file_decode(bytes, n, path, out, status);
    free(bytes);
    return rc;
}

void h3_image_file_clear(h3_image_file *f) {
    free(f->pixels);
    memset(f, 0, sizeof *f);
}
