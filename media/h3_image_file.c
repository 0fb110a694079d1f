/* h3_image_file.c - keyframe files through GdkPixbuf (h3_image_file.h). */
#include "h3_image_file.h"

#include <errno.h>
#include <fcntl.h>
#include <gdk-pixbuf/gdk-pixbuf.h>
#include <zlib.h>
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

/* The size rule of every keyframe file, applied to what a header announces
 * (the PNG and JPEG walks below, then GdkPixbuf's size-prepared): 1 if
 * refused. */
static int size_refused(int64_t width, int64_t height) {
    return width < 1 || height < 1 || width > H3_MAX_IMAGE_SIDE || height > H3_MAX_IMAGE_SIDE ||
           width * height > H3_IMAGE_FILE_MAX_PIXELS;
}

static h3_status_code size_error(const char *name, int64_t width, int64_t height, h3_status *status) {
    if (width < 1 || height < 1)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "image '%s' is %lldx%lld: it has no pixels", name,
                       (long long)width, (long long)height);
    return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                   "image '%s' is %lldx%lld: at most %d pixels a side and %lld in all", name, (long long)width,
                   (long long)height, H3_MAX_IMAGE_SIDE, (long long)H3_IMAGE_FILE_MAX_PIXELS);
}

/* The size GdkPixbuf reports, checked again before it allocates the
 * pixels (the header walks below have checked what they could read). A
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
    if (size_refused(width, height)) {
        a->refused = 1;
        gdk_pixbuf_loader_set_size(loader, 0, 0);
    }
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

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* A chunk type or marker for a message: the four letters, or "a" chunk
 * when they are not letters. */
static void chunk_name(const uint8_t *type, char out[8]) {
    for (int i = 0; i < 4; i++)
        if (!g_ascii_isalpha(type[i])) {
            strcpy(out, "a");
            return;
        }
    memcpy(out, type, 4);
    out[4] = 0;
}

/* The bytes of filtered rows an IHDR announces (a filter byte per row, and
 * Adam7's seven passes when interlaced), or 0 when its fields are not a
 * valid PNG header (libpng then says what is wrong). */
static uint64_t png_image_bytes(const uint8_t *ihdr) {
    uint64_t w = be32(ihdr), h = be32(ihdr + 4);
    int depth = ihdr[8], type = ihdr[9], interlace = ihdr[12], channels;
    switch (type) {
    case 0: channels = 1; break;
    case 2: channels = 3; break;
    case 3: channels = 1; break;
    case 4: channels = 2; break;
    case 6: channels = 4; break;
    default: return 0;
    }
    int low_depth = depth == 1 || depth == 2 || depth == 4;
    if (!(depth == 8 || (depth == 16 && type != 3) || (low_depth && (type == 0 || type == 3))) || interlace > 1)
        return 0;
    uint64_t bits = (uint64_t)channels * (uint64_t)depth;
    if (!interlace) return h * (1 + (w * bits + 7) / 8);
    static const uint8_t x0[7] = {0, 4, 0, 2, 0, 1, 0}, y0[7] = {0, 0, 4, 0, 2, 0, 1};
    static const uint8_t dx[7] = {8, 8, 4, 4, 2, 2, 1}, dy[7] = {8, 8, 8, 4, 4, 2, 2};
    uint64_t total = 0;
    for (int p = 0; p < 7; p++) {
        uint64_t pw = w > x0[p] ? (w - x0[p] + dx[p] - 1) / dx[p] : 0;
        uint64_t ph = h > y0[p] ? (h - y0[p] + dy[p] - 1) / dy[p] : 0;
        if (pw && ph) total += ph * (1 + (pw * bits + 7) / 8);
    }
    return total;
}

/* Inflates the IDAT data into a scratch buffer, counting the bytes up to
 * `want` (no more are made). Returns 0, or -1 with zs->msg on corrupt data. */
static int png_inflate(z_stream *zs, const uint8_t *data, size_t n, uint64_t want, uint64_t *got, int *ended) {
    uint8_t scratch[16384];
    zs->next_in = (Bytef *)data;
    zs->avail_in = (uInt)n;
    do {
        zs->next_out = scratch;
        zs->avail_out = sizeof scratch;
        int r = inflate(zs, Z_NO_FLUSH);
        *got += sizeof scratch - zs->avail_out;
        if (r == Z_STREAM_END) *ended = 1;
        else if (r == Z_BUF_ERROR) break;
        else if (r != Z_OK) return -1;
    } while (*got < want && !*ended && (zs->avail_in > 0 || zs->avail_out == 0));
    return 0;
}

/* GdkPixbuf's PNG loader (libpng's benign errors) accepts a PNG whose image
 * data stops short, and makes the image full size with the missing rows
 * left blank: a 74-byte file announcing 16384x16384 was a keyframe of 805 MB
 * of nothing. So before any loader exists, the chunks are walked (length
 * and type) to IEND, the size in IHDR is checked, and the IDAT stream is
 * inflated (into 16 KiB of scratch, never the image) until it covers every
 * row IHDR announces. A damaged file costs the bytes it has; a good one an
 * inflate more (a third of the decode's time for a 1280x720 PNG of noise,
 * about 20 ms on a loaded 2-core machine). What the walk does not judge (a
 * bad IHDR field, CRCs, chunk order) is left to libpng. */
static h3_status_code png_check(const uint8_t *b, size_t n, const char *name, h3_status *status) {
    size_t off = 8;
    uint64_t want = 0, got = 0;
    uint32_t w = 0, h = 0;
    int ended = 0, first = 1;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK) return h3_fail(status, H3_ERR_NO_MEMORY, "image '%s': out of memory", name);
    h3_status_code rc = H3_OK;
    for (;;) {
        char type[8];
        if (n - off < 12) {
            rc = h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated PNG: it ends after %zu bytes, before its "
                         "IEND chunk", name, n);
            break;
        }
        uint32_t len = be32(b + off);
        const uint8_t *data = b + off + 8;
        chunk_name(b + off + 4, type);
        if (len > n - off - 12) {
            rc = h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated PNG: its %s chunk at byte %zu announces "
                         "%u bytes, and the file ends %zu bytes after its head", name, type, off, len, n - off - 8);
            break;
        }
        if (first && len == 13 && memcmp(b + off + 4, "IHDR", 4) == 0) {
            w = be32(data), h = be32(data + 4);
            if (size_refused(w, h)) {
                rc = size_error(name, w, h, status);
                break;
            }
            want = png_image_bytes(data);
        }
        first = 0;
        if (memcmp(b + off + 4, "IEND", 4) == 0) break;
        if (memcmp(b + off + 4, "IDAT", 4) == 0 && want && got < want && !ended &&
            png_inflate(&zs, data, len, want, &got, &ended) != 0) {
            rc = h3_fail(status, H3_ERR_FORMAT, "image '%s' is a corrupt PNG: its image data (IDAT) does not "
                         "decompress: %s", name, zs.msg ? zs.msg : "zlib error");
            break;
        }
        off += 12 + (size_t)len;
    }
    inflateEnd(&zs);
    if (rc == H3_OK && got < want)
        rc = h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated PNG: its image data (IDAT) decompresses "
                     "to %llu bytes, fewer than the %llu that %ux%u pixels need", name, (unsigned long long)got,
                     (unsigned long long)want, w, h);
    return rc;
}

/* JPEG files the system's libjpeg would spend long on, or would take when
 * cut short, refused before it sees them, by a walk over the markers as
 * libjpeg reads them (jdmarker.c's next_marker: bytes before a 0xFF are
 * skipped, fill 0xFF bytes too, 0xFF00 is data; after SOS the entropy-coded
 * data runs to the next marker that is not a restart marker):
 * - arithmetic coding (SOF9-11, SOF13-15, DAC): Debian 12's libjpeg-turbo
 *   2.1.5 spins in its arithmetic decoder on some damaged data (the fuzzer's
 *   178-byte files ran for minutes, in tests/fuzz/regressions/image_file/).
 *   Such JPEGs are rare (web browsers do not decode them either);
 * - more than H3_JPEG_MAX_SCANS scans: a progressive JPEG has about ten, and
 *   every scan passes over the whole image, so a small file of thousands of
 *   empty scans multiplies the decoding time of a large image; libjpeg
 *   leaves such a limit to the caller;
 * - a size over the limits, from the frame header (SOF);
 * - truncated: libjpeg makes up what is missing (grey, with a warning
 *   GdkPixbuf drops) and decodes every block of the announced size: a
 *   147-byte JPEG announcing 16384x16384 cost 20-50 s and 1.7 GB, and a
 *   file cut mid-scan was a half-grey keyframe. So the walk must reach the
 *   end-of-image marker (EOI), and every scan that codes DC coefficients
 *   (all scans of a sequential JPEG, the first of a progressive one) must
 *   hold at least one bit for each of its 8x8 blocks: each block's DC
 *   difference is a Huffman code of at least one bit (T.81 F.1.2.1). */
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

/* The frame header (SOF) the scans are measured against. */
typedef struct jpeg_frame {
    int seen, lossless;
    uint32_t width, height, hmax, vmax, ncomp;
    uint8_t id[10], hs[10], vs[10];
} jpeg_frame;

static void jpeg_read_frame(const uint8_t *seg, size_t len, uint8_t marker, jpeg_frame *f) {
    if (f->seen || len < 8) return;
    f->seen = 1;
    f->lossless = marker == 0xc3 || marker == 0xc7;
    f->height = (uint32_t)seg[3] << 8 | seg[4];
    f->width = (uint32_t)seg[5] << 8 | seg[6];
    f->ncomp = seg[7] <= 10 && len >= 8 + 3 * (size_t)seg[7] ? seg[7] : 0;
    for (uint32_t i = 0; i < f->ncomp; i++) {
        f->id[i] = seg[8 + 3 * i];
        f->hs[i] = seg[9 + 3 * i] >> 4;
        f->vs[i] = seg[9 + 3 * i] & 15;
        if (f->hs[i] > f->hmax) f->hmax = f->hs[i];
        if (f->vs[i] > f->vmax) f->vmax = f->vs[i];
    }
}

/* The 8x8 blocks a scan codes a DC coefficient of, at the least (each
 * component on its own: an interleaved scan pads to whole MCUs); 0 when it
 * codes none (a progressive AC scan, lossless) or the headers are not ones
 * libjpeg would take (it then says why). */
static uint64_t jpeg_dc_blocks(const uint8_t *seg, size_t len, const jpeg_frame *f) {
    if (!f->seen || f->lossless || f->height == 0 || len < 3) return 0;
    size_t ns = seg[2];
    if (len < 3 + 2 * ns + 3 || seg[3 + 2 * ns] != 0) return 0; /* Ss: 0 codes DC */
    uint64_t blocks = 0;
    for (size_t i = 0; i < ns; i++)
        for (uint32_t c = 0; c < f->ncomp; c++) {
            if (f->id[c] != seg[3 + 2 * i] || !f->hs[c] || !f->vs[c]) continue;
            uint64_t cw = ((uint64_t)f->width * f->hs[c] + f->hmax - 1) / f->hmax;
            uint64_t ch = ((uint64_t)f->height * f->vs[c] + f->vmax - 1) / f->vmax;
            blocks += ((cw + 7) / 8) * ((ch + 7) / 8);
            break;
        }
    return blocks;
}

/* One segment's checks (off: its length bytes, len: its length). */
static h3_status_code jpeg_segment(const uint8_t *b, size_t off, size_t len, uint8_t m, jpeg_frame *f,
                                   const char *name, h3_status *status) {
    if ((m >= 0xc9 && m <= 0xcb) || (m >= 0xcd && m <= 0xcf) || m == 0xcc)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "image '%s' is an arithmetic-coded JPEG (marker 0xFF%02X): not read, since the system's "
                       "libjpeg can hang on a damaged one; save it as a baseline or progressive JPEG, or as PNG",
                       name, m);
    if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && !f->seen) {
        jpeg_read_frame(b + off, len, m, f);
        if (f->seen && f->height != 0 && size_refused(f->width, f->height))
            return size_error(name, f->width, f->height, status);
    }
    return H3_OK;
}

static h3_status_code jpeg_check(const uint8_t *b, size_t n, const char *name, h3_status *status) {
    size_t off = 2; /* past SOI */
    int scans = 0;
    jpeg_frame frame;
    memset(&frame, 0, sizeof frame);
    while ((off = jpeg_next_marker(b, n, off, 0)) != 0) {
        uint8_t m = b[off++];
        if (m == 0xd9) return H3_OK;                          /* EOI */
        if (m == 0x01 || (m >= 0xd0 && m <= 0xd8)) continue; /* TEM, RSTn, SOI: no length */
        size_t len = n - off >= 2 ? (size_t)b[off] << 8 | b[off + 1] : 0;
        if (n - off < 2 || len > n - off)
            return h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated JPEG: it ends inside its 0xFF%02X "
                           "segment at byte %zu (%zu bytes)", name, m, off - 2, n);
        if (len < 2)
            return h3_fail(status, H3_ERR_FORMAT, "image '%s' is a corrupt JPEG: its 0xFF%02X segment at byte %zu "
                           "has a length of %zu", name, m, off - 2, len);
        h3_status_code rc = jpeg_segment(b, off, len, m, &frame, name, status);
        if (rc != H3_OK) return rc;
        size_t seg = off;
        off += len;
        if (m != 0xda) continue;
        if (++scans > H3_JPEG_MAX_SCANS)
            return h3_fail(status, H3_ERR_FORMAT,
                           "image '%s' is a JPEG of more than %d scans (a progressive one has about ten): not read, "
                           "each scan costs a pass over the whole image",
                           name, H3_JPEG_MAX_SCANS);
        size_t next = jpeg_next_marker(b, n, off, 1);
        if (next == 0)
            return h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated JPEG: the image data of its scan %d "
                           "runs to the end of the file (%zu bytes), with no end-of-image marker (FF D9)",
                           name, scans, n);
        uint64_t blocks = jpeg_dc_blocks(b + seg, len, &frame), bytes = next - 1 - off;
        if (bytes * 8 < blocks)
            return h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated JPEG: scan %d holds %llu bytes of image "
                           "data, fewer than its %llu blocks of 8x8 pixels of a %ux%u image need (a bit each at the "
                           "least)", name, scans, (unsigned long long)bytes, (unsigned long long)blocks,
                           frame.width, frame.height);
        off = next - 1; /* the 0xFF before it, where the loop looks */
    }
    return h3_fail(status, H3_ERR_FORMAT, "image '%s' is a truncated JPEG: %zu bytes and no end-of-image marker "
                   "(FF D9)", name, n);
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
    rc = png ? png_check(bytes, n, name, status) : jpeg_check(bytes, n, name, status);
    if (rc != H3_OK) return rc;
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
    if (a.refused) rc = size_error(name, a.width, a.height, status);
    else if (!ok || !pb)
        rc = h3_fail(status, H3_ERR_FORMAT, "image '%s' cannot be decoded as %s: %s", name, png ? "PNG" : "JPEG",
                     err ? err->message : "no image");
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
