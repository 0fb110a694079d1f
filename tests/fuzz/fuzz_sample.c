/* fuzz_sample: gst-plugin/gsth3videosrc-sample.c, the element's image and
 * last-image properties: a GstSample an application hands over, whose
 * buffer is memory it describes (caps, GstVideoMeta offsets and strides).
 *
 * The input builds the sample: a 32-byte head (format, width, height, the
 * meta's presence, format, size, plane count, offsets and strides, the
 * buffer's size and its cut into up to three memory blocks), then the
 * bytes the blocks are filled with. With the head's flag 0x10 the caps are
 * parsed from text instead ("video/x-raw" and the bytes after the head up
 * to a zero: features, interlace modes, multiview, colorimetry, odd
 * fields). Each block is
 * malloc'd at its exact size and wrapped, so that a read past one hits
 * ASan's redzone.
 *
 * An accepted sample must give packed RGB of the caps' size, and every
 * plane's rows (computed here, apart from the code under test) must lie in
 * the memory block that holds the plane's offset; an RGB, RGBx or RGBA
 * one's pixels must be the buffer's bytes at the meta's layout. A refused
 * one leaves nothing allocated and a message. GStreamer is the system's
 * (not instrumented): what is fuzzed is the checks before it reads. */
#include "h3_fuzz.h"

#include <gst/gst.h>
#include <gst/video/video.h>

#include "gsth3videosrc-sample.h"

#define HEAD 32
#define MAX_BUFFER (1u << 18)

static void drop_warning(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer user) {
    (void)domain; (void)level; (void)message; (void)user;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    /* the video library only: no plugins, no registry file */
    g_setenv("GST_PLUGIN_SYSTEM_PATH_1_0", "", TRUE);
    g_setenv("GST_PLUGIN_PATH_1_0", "", TRUE);
    g_setenv("GST_REGISTRY_DISABLE", "yes", TRUE);
    gst_init(NULL, NULL);
    /* GStreamer's warnings on odd caps text (not fatal, only noise) */
    g_log_set_handler("GStreamer", G_LOG_LEVEL_WARNING, drop_warning, NULL);
    return 0;
}

static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static const GstVideoFormat formats[8] = {
    GST_VIDEO_FORMAT_RGB, GST_VIDEO_FORMAT_RGBx, GST_VIDEO_FORMAT_RGBA, GST_VIDEO_FORMAT_I420,
    GST_VIDEO_FORMAT_RGB, GST_VIDEO_FORMAT_I420, GST_VIDEO_FORMAT_NV12, GST_VIDEO_FORMAT_BGRA,
};

/* The sample's parts, from the head. */
typedef struct spec {
    GstVideoFormat format, meta_format;
    int width, height, meta, n_planes, caps_text;
    unsigned meta_width, meta_height;
    gsize offset[GST_VIDEO_MAX_PLANES];
    gint stride[GST_VIDEO_MAX_PLANES];
    size_t size, cut[2];
} spec;

/* Sizes mostly small (fast), at times anything a u16 holds. */
static int side(const uint8_t *p) {
    uint16_t v = get16(p);
    return v & 0x8000 ? (v & 0x7fff) : v % 97;
}

static void read_spec(const uint8_t *h, spec *s) {
    memset(s, 0, sizeof *s);
    s->format = formats[h[0] & 7];
    s->width = side(h + 1);
    s->height = side(h + 3);
    s->meta = h[5] & 1;
    s->caps_text = (h[5] & 0x10) != 0;
    s->meta_format = h[5] & 0x20 ? formats[h[6] & 7] : s->format;
    s->meta_width = (unsigned)(s->width + (int8_t)(h[5] & 0x40 ? h[7] : 0));
    s->meta_height = (unsigned)(s->height + (int8_t)(h[5] & 0x80 ? h[8] : 0));
    s->n_planes = h[9] % 5;
    for (int p = 0; p < 4; p++) {
        uint16_t o = get16(h + 10 + 2 * p);
        /* offsets near the planes' usual places, or anywhere */
        s->offset[p] = o & 0x8000 ? (gsize)(o & 0x7fff) * 64 : o;
    }
    for (int p = 0; p < 3; p++) {
        uint16_t v = get16(h + 18 + 2 * p);
        /* small, or up to +-10^8 in steps of 6211 */
        s->stride[p] = v & 0x8000 ? (gint)(v & 0x3fff) * 6211 * (v & 0x4000 ? -1 : 1) : v % 512;
    }
    s->stride[3] = s->stride[2];
    s->size = get32(h + 24) % MAX_BUFFER;
    s->cut[0] = get16(h + 28) % (s->size + 1);
    s->cut[1] = get16(h + 30) % (s->size + 1);
    if (s->cut[1] < s->cut[0]) {
        size_t t = s->cut[0];
        s->cut[0] = s->cut[1], s->cut[1] = t;
    }
}

/* data[k] = fill[(at + k) % nfill] (or (at + k) & 255 without fill): one
 * period written, then doubled (it stays periodic). */
static void fill_periodic(uint8_t *data, size_t n, size_t at, const uint8_t *fill, size_t nfill) {
    size_t period = nfill ? nfill : 256;
    size_t first = period < n ? period : n;
    for (size_t k = 0; k < first; k++) data[k] = nfill ? fill[(at + k) % nfill] : (uint8_t)(at + k);
    for (size_t done = first; done < n;) {
        size_t m = done < n - done ? done : n - done;
        memcpy(data + done, data, m);
        done += m;
    }
}

/* Memory blocks [0, cut0), [cut0, cut1), [cut1, size) (empty ones left out),
 * each its own malloc of exactly its size, filled from fill (repeated). */
static GstBuffer *make_buffer(const spec *s, const uint8_t *fill, size_t nfill) {
    GstBuffer *buf = gst_buffer_new();
    size_t bounds[4] = {0, s->cut[0], s->cut[1], s->size};
    for (int i = 0; i < 3; i++) {
        size_t n = bounds[i + 1] - bounds[i];
        if (!n) continue;
        uint8_t *data = g_malloc(n);
        fill_periodic(data, n, bounds[i], fill, nfill);
        gst_buffer_append_memory(buf, gst_memory_new_wrapped(0, data, n, 0, n, data, g_free));
    }
    return buf;
}

/* The caps: from the head, or "video/x-raw" followed by the text (its
 * features and fields). One structure only, a name of ours: GStreamer's
 * caps parser raises a critical on some other names (in
 * gst_structure_new_empty), which is its own business, not the element's.
 * *skip: an input not used. */
static GstCaps *make_caps(const spec *s, const uint8_t *text, size_t n, int *skip) {
    *skip = 0;
    if (!s->caps_text)
        return gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, gst_video_format_to_string(s->format),
                                   "width", G_TYPE_INT, s->width, "height", G_TYPE_INT, s->height, "framerate",
                                   GST_TYPE_FRACTION, 0, 1, NULL);
    size_t max = n < 512 ? n : 512;
    const uint8_t *end = memchr(text, 0, max);
    size_t len = end ? (size_t)(end - text) : max;
    if (memchr(text, ';', len) || !g_utf8_validate((const gchar *)text, (gssize)len, NULL)) {
        *skip = 1;
        return NULL;
    }
    gchar *t = g_strdup_printf("video/x-raw%.*s", (int)len, (const gchar *)text);
    GstCaps *caps = gst_caps_from_string(t);
    g_free(t);
    return caps;
}

/* Rows and row bytes of plane p of a w x h frame, for the four formats
 * taken (written here again, apart from gsth3videosrc-sample.c). */
static void rows_of(GstVideoFormat f, int p, int w, int h, uint64_t *rows, uint64_t *row_bytes) {
    if (f == GST_VIDEO_FORMAT_I420) {
        *rows = p ? (uint64_t)(h + 1) / 2 : (uint64_t)h;
        *row_bytes = p ? (uint64_t)(w + 1) / 2 : (uint64_t)w;
    } else {
        *rows = (uint64_t)h;
        *row_bytes = (uint64_t)w * (f == GST_VIDEO_FORMAT_RGB ? 3 : 4);
    }
}

/* The accepted sample's planes lie in their memory blocks; RGB(x/A)
 * pixels are the buffer's bytes. */
static void check_accepted(GstSample *sample, const h3_image_file *f) {
    GstVideoInfo info;
    GstBuffer *buf = gst_sample_get_buffer(sample);
    if (!gst_video_info_from_caps(&info, gst_sample_get_caps(sample))) abort();
    int w = GST_VIDEO_INFO_WIDTH(&info), h = GST_VIDEO_INFO_HEIGHT(&info);
    GstVideoFormat fmt = GST_VIDEO_INFO_FORMAT(&info);
    const h3_image *im = &f->image;
    if (im->width != w || im->height != h || im->stride != (size_t)w * 3 || im->rgb != f->pixels || !f->pixels)
        abort();
    if (w > H3_MAX_IMAGE_SIDE || h > H3_MAX_IMAGE_SIDE || (int64_t)w * h > H3_MAX_IMAGE_PIXELS) abort();
    GstVideoMeta *meta = gst_buffer_get_video_meta(buf);
    size_t size = gst_buffer_get_size(buf);
    int n_planes = (int)GST_VIDEO_INFO_N_PLANES(&info);
    for (int p = 0; p < n_planes; p++) {
        uint64_t rows, row_bytes;
        rows_of(fmt, p, w, h, &rows, &row_bytes);
        uint64_t off = meta ? meta->offset[p] : GST_VIDEO_INFO_PLANE_OFFSET(&info, p);
        int64_t stride = meta ? meta->stride[p] : GST_VIDEO_INFO_PLANE_STRIDE(&info, p);
        if (stride < (int64_t)row_bytes) abort();
        uint64_t end = off + (rows - 1) * (uint64_t)stride + row_bytes;
        if (end > size) abort();
        if (meta) { /* within the block holding the offset */
            guint idx, len;
            gsize skip;
            if (!gst_buffer_find_memory(buf, off, 1, &idx, &len, &skip)) abort();
            if (skip + (end - off) > gst_buffer_peek_memory(buf, idx)->size) abort();
        }
    }
    volatile uint8_t sink = 0;
    for (int y = 0; y < h; y++) sink ^= h3_fuzz_touch(im->rgb + (size_t)y * im->stride, im->stride);
    (void)sink;
    if (fmt == GST_VIDEO_FORMAT_I420) return;
    int px = fmt == GST_VIDEO_FORMAT_RGB ? 3 : 4;
    uint64_t off = meta ? meta->offset[0] : 0;
    int64_t stride = meta ? meta->stride[0] : GST_VIDEO_INFO_PLANE_STRIDE(&info, 0);
    for (int y = 0; y < h; y += 1 + h / 8)
        for (int x = 0; x < w; x += 1 + w / 8) {
            uint8_t want[3];
            if (gst_buffer_extract(buf, off + (uint64_t)y * stride + (uint64_t)x * px, want, 3) != 3) abort();
            if (memcmp(want, im->rgb + (size_t)y * im->stride + (size_t)x * 3, 3) != 0) abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < HEAD) return 0;
    spec s;
    read_spec(data, &s);
    int skip;
    GstCaps *caps = make_caps(&s, data + HEAD, size - HEAD, &skip);
    if (skip) return 0;
    GstBuffer *buf = make_buffer(&s, data + HEAD, size - HEAD);
    if (s.meta && s.n_planes > 0)
        gst_buffer_add_video_meta_full(buf, GST_VIDEO_FRAME_FLAG_NONE, s.meta_format, s.meta_width, s.meta_height,
                                       (guint)s.n_planes, s.offset, s.stride);
    GstSample *sample = gst_sample_new(buf, caps, NULL, NULL);
    h3_image_file f;
    gchar *msg = NULL;
    GstH3SampleResult r = gst_h3_sample_to_rgb(sample, &f, &msg);
    if (r == GST_H3_SAMPLE_OK) {
        if (msg) abort();
        check_accepted(sample, &f);
    } else {
        if (!msg || f.pixels || f.image.rgb) abort();
        volatile size_t n = strlen(msg);
        (void)n;
    }
    g_free(msg);
    h3_image_file_clear(&f);
    gst_sample_unref(sample);
    gst_buffer_unref(buf);
    if (caps) gst_caps_unref(caps);
    return 0;
}
