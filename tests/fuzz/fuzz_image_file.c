/* fuzz_image_file: media/h3_image_file, the keyframe decoder of h3-generate
 * --image and the element's image-location (PNG and JPEG; other formats are
 * refused from their first bytes, before any GdkPixbuf loader sees them).
 *
 * The input is decoded from memory (h3_image_file_decode) and, when small,
 * loaded from a file too (h3_image_file_load, the path the element and the
 * CLI take). An accepted image must be within h3core's keyframe limits,
 * packed RGB (stride 3 x width), and every pixel byte readable; a refused
 * one leaves nothing allocated and a terminated message. GdkPixbuf and its
 * loaders (libpng, libjpeg-turbo) are the system's, not instrumented: what
 * is fuzzed is our use of them (the size callback, the conversion, the
 * checks before and after). */
#include "h3_fuzz.h"

#include "h3_image_file.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    return 0;
}

static void check_image(const h3_image_file *f) {
    const h3_image *im = &f->image;
    if (im->width < 1 || im->height < 1 || im->width > H3_MAX_IMAGE_SIDE || im->height > H3_MAX_IMAGE_SIDE ||
        (int64_t)im->width * im->height > H3_IMAGE_FILE_MAX_PIXELS || im->stride != (size_t)im->width * 3 ||
        im->rgb != f->pixels || !f->pixels)
        abort();
    volatile uint8_t sink = 0;
    for (int y = 0; y < im->height; y++) sink ^= h3_fuzz_touch(im->rgb + (size_t)y * im->stride, im->stride);
    (void)sink;
}

static void check_refused(const h3_image_file *f, const h3_status *st) {
    if (f->pixels || f->image.rgb) abort();
    h3_fuzz_check_status(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3_image_file f;
    h3_status st;
    if (h3_image_file_decode(data, size, "fuzz.img", &f, &st) == H3_OK) check_image(&f);
    else check_refused(&f, &st);
    h3_image_file_clear(&f);

    /* The file path: the same answer (and the file's own checks). */
    if (size <= 4096) {
        char *path = h3_fuzz_write("keyframe.img", data, size);
        h3_status_code rc = h3_image_file_load(path, &f, &st);
        if (rc == H3_OK) check_image(&f);
        else check_refused(&f, &st);
        h3_image_file_clear(&f);
        g_free(path);
    }
    return 0;
}
