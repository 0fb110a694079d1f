/* test_image_file.c - keyframe files (media/h3_image_file.c): the golden
 * PNG decodes to the pixels the reference read from it; JPEG and RGBA PNG
 * decode (alpha dropped); and each bad file is refused by name without
 * blocking or allocating what its header claims: missing, a FIFO, a
 * directory, empty, not an image, truncated, a 0x0 or 20000x20000 header.
 * A damaged body is refused as truncated before any decoder runs: a PNG
 * whose image data or IEND is missing, a JPEG without its end-of-image
 * marker or with too little scan data for its size (16384x16384 announced
 * by a few dozen bytes costs microseconds, not 20-50 s and 1.7 GB). */
#include <gdk-pixbuf/gdk-pixbuf.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <jpeglib.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "h3_image_file.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"

static char *tmp_dir;

static char *tmp_path(const char *name) { return g_build_filename(tmp_dir, name, NULL); }

static void write_bytes(const char *path, const void *data, size_t n) {
    CHECK(g_file_set_contents(path, data, (gssize)n, NULL), "writing %s", path);
}

/* The bytes of a pixbuf saved in `type` ("png", "jpeg"). */
static gchar *encoded(GdkPixbuf *pb, const char *type, gsize *n) {
    gchar *buf = NULL;
    GError *err = NULL;
    CHECK(gdk_pixbuf_save_to_buffer(pb, &buf, n, type, &err, NULL), "saving %s: %s", type, err ? err->message : "");
    if (err) g_error_free(err);
    return buf;
}

static void test_golden_png(void) {
    h3_image_file f;
    h3_status st = {0};
    const char *png = h3_test_data("goldens/tiny-h3/e2e_fl2va_keyframe.png");
    CHECK(h3_image_file_load(png, &f, &st) == H3_OK, "golden PNG: %s", st.message);
    h3_st_file *g = NULL;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/e2e_fl2va_3steps.safetensors"), &g, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        h3_image_file_clear(&f);
        return;
    }
    const h3_st_tensor *t = h3_st_find(g, "keyframe.input_uint8"); /* [H, W, 3], as PIL read the PNG */
    CHECK(t && f.image.height == t->shape[0] && f.image.width == t->shape[1] && f.image.stride == (size_t)f.image.width * 3,
          "golden PNG is %dx%d", f.image.width, f.image.height);
    if (t && f.pixels && (size_t)t->numel == (size_t)f.image.width * f.image.height * 3)
        CHECK(memcmp(f.pixels, t->data, (size_t)t->numel) == 0, "golden PNG pixels differ from PIL's");
    printf("golden PNG %dx%d: the pixels PIL read\n", f.image.width, f.image.height);
    h3_st_close(g);
    h3_image_file_clear(&f);
}

static void test_formats(void) {
    GdkPixbuf *rgba = gdk_pixbuf_new(GDK_COLORSPACE_RGB, TRUE, 8, 37, 21);
    guchar *px = gdk_pixbuf_get_pixels(rgba);
    int row = gdk_pixbuf_get_rowstride(rgba);
    for (int y = 0; y < 21; y++)
        for (int x = 0; x < 37; x++) {
            guchar *p = px + y * row + x * 4;
            p[0] = (guchar)(x * 7), p[1] = (guchar)(y * 11), p[2] = (guchar)(x + y), p[3] = (guchar)(x * 3);
        }
    gsize n;
    gchar *png = encoded(rgba, "png", &n);
    h3_image_file f;
    h3_status st = {0};
    CHECK(png && h3_image_file_decode((const uint8_t *)png, n, "rgba.png", &f, &st) == H3_OK, "RGBA PNG: %s",
          st.message);
    int same = f.pixels && f.image.width == 37 && f.image.height == 21;
    for (int y = 0; same && y < 21; y++)
        for (int x = 0; x < 37; x++)
            same &= memcmp(f.pixels + (size_t)y * f.image.stride + (size_t)x * 3, px + y * row + x * 4, 3) == 0;
    CHECK(same, "RGBA PNG: the colour channels are not kept as they were (alpha must be dropped, not composited)");
    h3_image_file_clear(&f);
    g_free(png);
    GdkPixbuf *rgb = gdk_pixbuf_new(GDK_COLORSPACE_RGB, FALSE, 8, 64, 48);
    gdk_pixbuf_fill(rgb, 0x3080c0ff);
    gchar *jpeg = encoded(rgb, "jpeg", &n);
    CHECK(jpeg && h3_image_file_decode((const uint8_t *)jpeg, n, "flat.jpg", &f, &st) == H3_OK, "JPEG: %s",
          st.message);
    CHECK(f.image.width == 64 && f.image.height == 48 && f.pixels && abs(f.pixels[0] - 0x30) <= 2 &&
              abs(f.pixels[1] - 0x80) <= 2 && abs(f.pixels[2] - 0xc0) <= 2,
          "JPEG: %dx%d, first pixel %d,%d,%d", f.image.width, f.image.height, f.pixels ? f.pixels[0] : -1,
          f.pixels ? f.pixels[1] : -1, f.pixels ? f.pixels[2] : -1);
    h3_image_file_clear(&f);
    /* truncated: the first half of the JPEG */
    h3_status_code rc = h3_image_file_decode((const uint8_t *)jpeg, n / 2, "half.jpg", &f, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "half.jpg") && strstr(st.message, "truncated"),
          "truncated JPEG: %s '%s'", h3_status_code_name(rc), st.message);
    g_free(jpeg);
    g_object_unref(rgba);
    g_object_unref(rgb);
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG signature and an IHDR chunk claiming w x h, 8-bit RGB, and nothing else. */
static size_t png_header(uint8_t *out, uint32_t w, uint32_t h) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(out, sig, 8);
    uint8_t *c = out + 8;
    put32(c, 13);
    memcpy(c + 4, "IHDR", 4);
    put32(c + 8, w);
    put32(c + 12, h);
    c[16] = 8, c[17] = 2, c[18] = 0, c[19] = 0, c[20] = 0;
    put32(c + 21, crc32_of(c + 4, 17));
    /* an empty IDAT: libpng reports the header once image data begins */
    uint8_t *d = c + 25;
    put32(d, 0);
    memcpy(d + 4, "IDAT", 4);
    put32(d + 8, crc32_of(d + 4, 4));
    return 8 + 25 + 12;
}

static void test_refusals(void) {
    h3_image_file f;
    h3_status st = {0};
    char *missing = tmp_path("missing.png");
    h3_status_code rc = h3_image_file_load(missing, &f, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && strstr(st.message, missing), "missing: %s '%s'", h3_status_code_name(rc),
          st.message);
    char *fifo = tmp_path("fifo.png");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    alarm(10); /* the old way (fopen) blocks here for a writer */
    rc = h3_image_file_load(fifo, &f, &st);
    alarm(0);
    CHECK(rc == H3_ERR_IO && strstr(st.message, "not a regular file"), "FIFO: %s '%s'", h3_status_code_name(rc),
          st.message);
    rc = h3_image_file_load(tmp_dir, &f, &st);
    CHECK(rc == H3_ERR_IO && strstr(st.message, "not a regular file"), "directory: %s '%s'", h3_status_code_name(rc),
          st.message);
    char *empty = tmp_path("empty.png"), *text = tmp_path("notes.png");
    write_bytes(empty, "", 0);
    write_bytes(text, "this is not an image\n", 21);
    rc = h3_image_file_load(empty, &f, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "empty"), "empty: %s '%s'", h3_status_code_name(rc), st.message);
    rc = h3_image_file_load(text, &f, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "cannot be decoded") && strstr(st.message, text),
          "text file: %s '%s'", h3_status_code_name(rc), st.message);
    /* Formats other than PNG and JPEG never reach a GdkPixbuf loader: the
     * fuzzer's 78-byte BMP (a header size of 0xbebebebe) made Debian 12's BMP
     * loader ask for 3.2 GB before any size was reported. */
    static const struct {
        const char *name, *bytes, *says;
        size_t n;
        h3_status_code code;
    } others[] = {
        {"fox.bmp", "BM\x01\xbe\xbe\0\0\0\0\xbe\xbe\xbe\xbe\xbe\xbe\xbe\xbe\xbe", "a BMP file", 18, H3_ERR_UNSUPPORTED},
        {"fox.gif", "GIF89a\x10\0\x10\0", "a GIF file", 10, H3_ERR_UNSUPPORTED},
        {"fox.webp", "RIFF\x10\0\0\0WEBPVP8 ", "a WebP file", 16, H3_ERR_UNSUPPORTED},
        {"fox.tif", "II*\0\x08\0\0\0", "a TIFF file", 8, H3_ERR_UNSUPPORTED},
        {"soi-only.jpg", "\xff\xd8\0\0", "not a PNG or JPEG", 4, H3_ERR_FORMAT},
        {"sig-cut.png", "\x89PNG\r\n", "not a PNG or JPEG", 6, H3_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        rc = h3_image_file_decode((const uint8_t *)others[i].bytes, others[i].n, others[i].name, &f, &st);
        CHECK(rc == others[i].code && strstr(st.message, others[i].name) && strstr(st.message, others[i].says) &&
                  strstr(st.message, "cannot be decoded") && !f.pixels,
              "%s: %s '%s'", others[i].name, h3_status_code_name(rc), st.message);
    }
    uint8_t hdr[64];
    size_t n = png_header(hdr, 20000, 20000);
    rc = h3_image_file_decode(hdr, n, "huge.png", &f, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "20000x20000") && strstr(st.message, "16384"),
          "20000x20000 header: %s '%s'", h3_status_code_name(rc), st.message);
    n = png_header(hdr, 0, 0);
    rc = h3_image_file_decode(hdr, n, "zero.png", &f, &st);
    CHECK(rc != H3_OK && strstr(st.message, "zero.png"), "0x0 header: %s '%s'", h3_status_code_name(rc), st.message);
    printf("refused: missing, FIFO, directory, empty, not an image, BMP, GIF, WebP, TIFF, bad signatures, "
           "20000x20000, 0x0\n");
    g_unlink(empty);
    g_unlink(text);
    g_unlink(fifo);
    g_free(missing);
    g_free(fifo);
    g_free(empty);
    g_free(text);
}

/* A baseline JPEG whose frame header announces w x h, with 16 bytes of scan
 * and no Huffman tables (libjpeg-turbo supplies the standard ones): what the
 * fuzzer made of image_file's seeds, 241 bytes announcing 22644x29765. */
static size_t jpeg_header(uint8_t *out, uint16_t w, uint16_t h) {
    static const uint8_t soi_dqt[5] = {0xff, 0xd8, 0xff, 0xdb, 0x00};
    size_t n = 0;
    memcpy(out, soi_dqt, 5), n = 5;
    out[n++] = 0x43, out[n++] = 0x00; /* table 0, 8-bit, 64 ones */
    memset(out + n, 1, 64), n += 64;
    const uint8_t sof[19] = {0xff, 0xc0, 0x00, 0x11, 0x08, (uint8_t)(h >> 8), (uint8_t)h, (uint8_t)(w >> 8),
                             (uint8_t)w, 0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x00, 0x03, 0x11, 0x00};
    memcpy(out + n, sof, 19), n += 19;
    const uint8_t sos[14] = {0xff, 0xda, 0x00, 0x0c, 0x03, 0x01, 0x00, 0x02, 0x00, 0x03, 0x00, 0x00, 0x3f, 0x00};
    memcpy(out + n, sos, 14), n += 14;
    for (int i = 0; i < 16; i++) out[n++] = (uint8_t)(0x40 + i);
    out[n++] = 0xff, out[n++] = 0xd9;
    return n;
}

static long max_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A size over the limits stops the decoder at its header. It used to be
 * shrunk to 1x1, which libjpeg honours only down to 1/8: the 122 bytes below
 * were decoded to 2831x3721 pixels (about 30 MB and 0.14 s) before being
 * refused. Run first, while the process's peak memory is low, so that the
 * peak says whether those pixels were made. */
static void test_huge_jpeg_not_decoded(void) {
    uint8_t jpg[160];
    size_t n = jpeg_header(jpg, 22644, 29765);
    h3_image_file f;
    h3_status st = {0};
    long before = max_rss_kb();
    h3_status_code rc = h3_image_file_decode(jpg, n, "bomb.jpg", &f, &st);
    long grew = max_rss_kb() - before;
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "22644x29765") && strstr(st.message, "bomb.jpg"),
          "22644x29765 JPEG: %s '%s'", h3_status_code_name(rc), st.message);
    CHECK(grew < 12 * 1024, "22644x29765 JPEG: the peak memory grew by %ld KB: the decoder went on past the header",
          grew);
    printf("refused at its header: a %zu-byte JPEG announcing 22644x29765 (peak memory +%ld KB)\n", n, grew);
}

/* A progressive-looking JPEG of 8x8 pixels with `scans` empty scans. */
static uint8_t *jpeg_with_scans(int scans, size_t *n) {
    uint8_t *b = malloc(200 + (size_t)scans * 11), *p = b;
    static const uint8_t head[] = {0xff, 0xd8, 0xff, 0xc2, 0x00, 0x0b, 0x08, 0x00, 0x08, 0x00, 0x08, 0x01, 0x01,
                                   0x11, 0x00, 0xff, 0xdb, 0x00, 0x43, 0x00};
    memcpy(p, head, sizeof head), p += sizeof head;
    memset(p, 1, 64), p += 64;
    static const uint8_t sos[] = {0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00};
    for (int i = 0; i < scans; i++) memcpy(p, sos, sizeof sos), p += sizeof sos;
    *p++ = 0xff, *p++ = 0xd9;
    *n = (size_t)(p - b);
    return b;
}

/* JPEGs the system's libjpeg could spend minutes on are refused before it
 * reads them: an arithmetic-coded one (what the fuzzer found: the 178 bytes
 * below, SOF9, kept libjpeg-turbo 2.1.5 busy for over two minutes; alarm
 * turns a hang into a failure), and one of more than 1000 scans. */
static void test_jpeg_refusals(void) {
    static const uint8_t arith[] =
    "\xff\xd8\xff\xff\xdb\x00\x43\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x78\x00\x00\x00\x00\x00\x00\x00\xff\x54\xa9\xb7\x25\xaf\xde\x1c\x1c\x0e\x0e\x0e\x0e\x0e"
    "\x0e\x0e\x0e\x0e\x61\x75\x64\x69\x6f\x2f\x6d\x34\x61\x33\x34\x32\xff\xdb\x00\x43\x01\x09\x18\x09\x09\x0c\x0d\x0b"
    "\x0c\x0d\x18\x32\x21\x1c\x1b\x32\xe9\x32\x26\xb7\xa9\x55\x00\x00\x30\x30\x30\x30\x30\xd0\xcf\xcf\xcf\xcf\xcf\xcf"
    "\xd3\x30\x30\x30\x30\x30\x30\x30\x30\x30\x31\x38\x34\x35\x35\x36\x35\x39\x34\x30\x32\x36\x35\x39\x33\x39\x33\x39"
    "\x39\xff\xc9\x00\x11\x08\x00\x47\x00\x30\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01\x00\x01\x09\xff\xda\x00\x0c\x03"
    "\x01\x00\x02\x11\x03\x11\x00\xc5\xe0\x79";
    h3_image_file f;
    h3_status st = {0};
    alarm(30);
    h3_status_code rc = h3_image_file_decode(arith, sizeof arith - 1, "arith.jpg", &f, &st);
    alarm(0);
    CHECK(rc == H3_ERR_UNSUPPORTED && strstr(st.message, "arithmetic-coded") && strstr(st.message, "arith.jpg"),
          "arithmetic-coded JPEG: %s '%s'", h3_status_code_name(rc), st.message);
    size_t n;
    uint8_t *many = jpeg_with_scans(1001, &n);
    rc = h3_image_file_decode(many, n, "many.jpg", &f, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "more than 1000 scans") && strstr(st.message, "many.jpg"), "1001 scans: %s '%s'",
          h3_status_code_name(rc), st.message);
    free(many);
    many = jpeg_with_scans(1000, &n);
    alarm(30);
    rc = h3_image_file_decode(many, n, "many.jpg", &f, &st);
    alarm(0);
    CHECK(rc == H3_OK ? (h3_image_file_clear(&f), 1) : strstr(st.message, "more than") == NULL,
          "1000 scans: not refused for its scans: %s '%s'", h3_status_code_name(rc), rc == H3_OK ? "" : st.message);
    free(many);
    printf("refused before libjpeg: an arithmetic-coded JPEG (%zu bytes), 1001 scans\n", sizeof arith - 1);
}

/* A PNG from its IHDR fields and its filtered rows (compressed here), with
 * or without IEND. */
static uint8_t *png_file(uint32_t w, uint32_t h, int depth, int type, int interlace, const uint8_t *rows,
                         size_t nrows, int iend, size_t *n) {
    uLongf zn = compressBound(nrows);
    uint8_t *b = malloc(8 + 25 + 12 + zn + 12 + 12), *c;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(b, sig, 8);
    c = b + 8;
    put32(c, 13);
    memcpy(c + 4, "IHDR", 4);
    put32(c + 8, w);
    put32(c + 12, h);
    c[16] = (uint8_t)depth, c[17] = (uint8_t)type, c[18] = 0, c[19] = 0, c[20] = (uint8_t)interlace;
    put32(c + 21, crc32_of(c + 4, 17));
    c += 25;
    if (type == 3) { /* a palette of one entry */
        put32(c, 3);
        memcpy(c + 4, "PLTE\x10\x20\x30", 7);
        put32(c + 11, crc32_of(c + 4, 7));
        c += 15;
    }
    CHECK(compress2(c + 8, &zn, rows, nrows, 9) == Z_OK, "compress");
    put32(c, (uint32_t)zn);
    memcpy(c + 4, "IDAT", 4);
    put32(c + 8 + zn, crc32_of(c + 4, 4 + zn));
    c += 12 + zn;
    if (iend) {
        put32(c, 0);
        memcpy(c + 4, "IEND", 4);
        put32(c + 8, crc32_of(c + 4, 4));
        c += 12;
    }
    *n = (size_t)(c - b);
    return b;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void expect_truncated(const uint8_t *b, size_t n, const char *name, const char *says) {
    h3_image_file f;
    h3_status st = {0};
    double t0 = now_s();
    h3_status_code rc = h3_image_file_decode(b, n, name, &f, &st);
    double took = now_s() - t0;
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, name) && strstr(st.message, "truncated") &&
              (!says || strstr(st.message, says)) && !f.pixels,
          "%s (%zu bytes): %s '%s'", name, n, h3_status_code_name(rc), st.message);
    CHECK(took < 0.1, "%s: refused after %.3f s: the decoder ran", name, took);
    if (rc != H3_OK && !g_str_has_prefix(name, "cut.")) printf("  %s\n", st.message);
    h3_image_file_clear(&f);
}

/* The exact image data of each PNG layout is accepted; a byte less of it,
 * or no IEND, is truncated. Row bytes as libpng counts them: a filter byte,
 * then width x bits rounded up, per row of each Adam7 pass when
 * interlaced. */
static void test_png_truncated(void) {
    static const struct {
        int depth, type, interlace;
        size_t bytes; /* of 13x7 pixels */
    } layouts[] = {
        {8, 2, 0, 7 * (1 + 39)}, {1, 0, 0, 7 * (1 + 2)}, {16, 6, 0, 7 * (1 + 104)}, {4, 3, 0, 7 * (1 + 7)},
        /* Adam7 passes of 13x7: 2x1, 2x1, 4x1, 3x2, 7x2, 6x4, 13x3 pixels */
        {8, 2, 1, 1 * 7 + 1 * 7 + 1 * 13 + 2 * 10 + 2 * 22 + 4 * 19 + 3 * 40},
        {2, 0, 1, 1 * 2 + 1 * 2 + 1 * 2 + 2 * 2 + 2 * 3 + 4 * 3 + 3 * 5},
    };
    uint8_t zeros[1024] = {0};
    h3_image_file f;
    h3_status st = {0};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        size_t n;
        uint8_t *b = png_file(13, 7, layouts[i].depth, layouts[i].type, layouts[i].interlace, zeros,
                              layouts[i].bytes, 1, &n);
        h3_status_code rc = h3_image_file_decode(b, n, "exact.png", &f, &st);
        CHECK(rc == H3_OK && f.image.width == 13 && f.image.height == 7, "13x7 PNG of depth %d, type %d%s: %s '%s'",
              layouts[i].depth, layouts[i].type, layouts[i].interlace ? ", interlaced" : "", h3_status_code_name(rc),
              rc == H3_OK ? "" : st.message);
        h3_image_file_clear(&f);
        CHECK(n > 12 && (expect_truncated(b, n - 12, "no-iend.png", "IEND"), 1), "no IEND");
        free(b);
        b = png_file(13, 7, layouts[i].depth, layouts[i].type, layouts[i].interlace, zeros, layouts[i].bytes - 1, 1,
                     &n);
        expect_truncated(b, n, "short.png", "image data");
        free(b);
    }
    /* A real PNG cut anywhere in its chunks. */
    GdkPixbuf *pb = gdk_pixbuf_new(GDK_COLORSPACE_RGB, FALSE, 8, 64, 48);
    gdk_pixbuf_fill(pb, 0x3080c0ff);
    gsize pn;
    gchar *png = encoded(pb, "png", &pn);
    for (size_t cut = 9; cut < pn; cut += 7) expect_truncated((const uint8_t *)png, cut, "cut.png", NULL);
    g_free(png);
    g_object_unref(pb);
    /* What the issue measured: 74 bytes announcing 16384x16384 (a side and
     * a pixel count at the limits), a complete zlib stream of a row and an
     * IEND, decoded by GdkPixbuf to 805 MB of blank rows. */
    static const uint8_t rows[1 + 16384 * 3];
    size_t n;
    uint8_t *b = png_file(16384, 16384, 8, 2, 0, rows, sizeof rows, 1, &n);
    long before = max_rss_kb();
    expect_truncated(b, n, "bomb.png", "16384x16384");
    CHECK(max_rss_kb() - before < 12 * 1024, "bomb.png: the peak memory grew by %ld KB", max_rss_kb() - before);
    printf("truncated PNGs refused (a %zu-byte one announcing 16384x16384 too)\n", n);
    free(b);
}

/* A JPEG without its end-of-image marker, or with too little scan data for
 * the blocks its frame announces, is truncated; data after EOI is not. */
static void test_jpeg_truncated(void) {
    GdkPixbuf *pb = gdk_pixbuf_new(GDK_COLORSPACE_RGB, FALSE, 8, 64, 48);
    gdk_pixbuf_fill(pb, 0x3080c0ff);
    gsize n;
    gchar *jpeg = encoded(pb, "jpeg", &n);
    expect_truncated((const uint8_t *)jpeg, n - 2, "no-eoi.jpg", "end-of-image");
    for (size_t cut = 3; cut < n - 2; cut += 13) expect_truncated((const uint8_t *)jpeg, cut, "cut.jpg", NULL);
    gchar *tail = g_malloc(n + 5);
    memcpy(tail, jpeg, n);
    memcpy(tail + n, "junk\n", 5);
    h3_image_file f;
    h3_status st = {0};
    h3_status_code rc = h3_image_file_decode((const uint8_t *)tail, n + 5, "tail.jpg", &f, &st);
    CHECK(rc == H3_OK && f.image.width == 64, "bytes after EOI: %s '%s'", h3_status_code_name(rc),
          rc == H3_OK ? "" : st.message);
    h3_image_file_clear(&f);
    g_free(tail);
    g_free(jpeg);
    g_object_unref(pb);
    /* The 147 bytes announcing 16384x16384 (within the limits): 16
     * bytes of scan for 6 million blocks, which libjpeg made up in 20-50 s. */
    uint8_t jpg[160];
    size_t jn = jpeg_header(jpg, 16384, 16384);
    long before = max_rss_kb();
    expect_truncated(jpg, jn, "bomb.jpg", "16384x16384");
    CHECK(max_rss_kb() - before < 12 * 1024, "bomb.jpg: the peak memory grew by %ld KB", max_rss_kb() - before);
    printf("truncated JPEGs refused (a %zu-byte one announcing 16384x16384 too); bytes after EOI kept\n", jn);
}

/* A JPEG of w x h pixels written by libjpeg: grey or RGB, a flat picture or
 * noise, progressive or not, a restart marker every restart MCUs. */
static unsigned char *jpeg_encoded(int w, int h, int grey, int noise, int progressive, int restart,
                                   unsigned long *n) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    unsigned char *out = NULL;
    *n = 0;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, n);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
    c.input_components = grey ? 1 : 3;
    c.in_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 85, TRUE);
    if (progressive) jpeg_simple_progression(&c);
    c.restart_interval = (unsigned)restart;
    jpeg_start_compress(&c, TRUE);
    JSAMPLE *row = malloc((size_t)w * 3);
    uint32_t seed = 12345;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w * c.input_components; x++) {
            seed = seed * 1103515245u + 12345u;
            row[x] = noise ? (JSAMPLE)(seed >> 24) : 0x60;
        }
        JSAMPROW rows[1] = {row};
        jpeg_write_scanlines(&c, rows, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return out;
}

/* JPEGs as encoders write them pass the walk and decode: baseline,
 * progressive (its first scans code DC at a bit a block, the bound the walk
 * checks, met exactly by a flat picture's one-symbol Huffman table), restart
 * markers in the scan, grey, one pixel. Each cut by a byte is truncated. */
static void test_jpeg_layouts(void) {
    static const struct {
        int w, h, grey, noise, progressive, restart;
    } cases[] = {
        {64, 48, 0, 1, 0, 0}, {64, 48, 0, 1, 1, 0}, {512, 512, 1, 0, 1, 0}, {512, 512, 0, 0, 1, 0},
        {33, 17, 0, 1, 0, 1}, {33, 17, 1, 1, 1, 2}, {1, 1, 0, 0, 1, 0}, {2048, 8, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned long n;
        unsigned char *jpg = jpeg_encoded(cases[i].w, cases[i].h, cases[i].grey, cases[i].noise,
                                          cases[i].progressive, cases[i].restart, &n);
        h3_image_file f;
        h3_status st = {0};
        h3_status_code rc = h3_image_file_decode(jpg, n, "made.jpg", &f, &st);
        CHECK(rc == H3_OK && f.image.width == cases[i].w && f.image.height == cases[i].h,
              "%dx%d %s%s%s JPEG (%lu bytes), restart %d: %s '%s'", cases[i].w, cases[i].h,
              cases[i].grey ? "grey" : "RGB", cases[i].noise ? " noise" : " flat",
              cases[i].progressive ? " progressive" : "", n, cases[i].restart, h3_status_code_name(rc),
              rc == H3_OK ? "" : st.message);
        h3_image_file_clear(&f);
        expect_truncated(jpg, n - 1, "cut.jpg", NULL);
        free(jpg);
    }
    printf("JPEGs written by libjpeg taken: baseline, progressive (flat: a bit a block), restart markers, grey, "
           "1x1\n");
}

int main(void) {
    tmp_dir = g_dir_make_tmp("h3-image-XXXXXX", NULL);
    test_huge_jpeg_not_decoded();
    test_golden_png();
    test_formats();
    test_refusals();
    test_jpeg_refusals();
    test_png_truncated();
    test_jpeg_truncated();
    test_jpeg_layouts();
    g_rmdir(tmp_dir);
    g_free(tmp_dir);
    return h3_test_finish("test_image_file");
}
