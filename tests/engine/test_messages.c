/* test_messages.c - errors that name what to change (issue 14, item 4): a
 * prompt past the text encoder's positions is refused at validation with
 * the limit in tokens; a tokenizer file h3core cannot use is a FORMAT error
 * naming the file (a model-file problem, not a setting); a GPU list with
 * compute=cpu advises a cpu:N that is then accepted and runs. */
#include <glib.h>
#include <stdint.h>

#include "h3.h"
#include "engine/h3_engine.h" /* h3_engine_force_text_release */
#include "h3_test.h"
#include "h3_test_engine.h"
#include "h3_test_capture.h"
#include "h3_test_model.h"

#define TINY "models/tiny-h3"

static h3_request small_request(const char *prompt) { return h3_test_small_request(prompt, 1); }

static h3_status_code open_engine(const char *dir, const char *devices, h3_engine **e, h3_status *st) {
    return h3_test_open_cpu(dir, devices, NULL, 2, e, st);
}

/* 100,000 characters: refused by validation (and so by generate) before the
 * text encoder runs, naming the prompt, its tokens and the limit. */
static void test_long_prompt(h3_engine *e) {
    GString *text = g_string_new(NULL);
    while (text->len < 100000) g_string_append(text, "a red fox runs through fresh snow, ");
    h3_request r = small_request(text->str);
    h3_plan plan;
    h3_status st = {0};
    h3_status_code rc = h3_engine_validate(e, &r, &plan, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "prompt") && strstr(st.message, "tokens") &&
              strstr(st.message, "4096"),
          "long prompt: rc %d '%s'", rc, st.message);
    printf("100,000-character prompt: %s\n", st.message);
    h3_callbacks cb = {0};
    rc = h3_engine_generate(e, &r, &cb, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "4096"), "long prompt generate: rc %d '%s'", rc,
          st.message);
    g_string_free(text, TRUE);
}

/* tokenizer.json rewritten: `from` replaced by `to` (or cut to `cut` bytes). */
static void test_tokenizer(const char *from, const char *to, gsize cut) {
    char *dir = h3_test_copy_data(TINY);
    CHECK(dir != NULL, "copy of the tiny model");
    if (!dir) return;
    char *path = g_build_filename(dir, "tokenizer", "tokenizer.json", NULL);
    gchar *json = NULL;
    gsize n = 0;
    CHECK(g_file_get_contents(path, &json, &n, NULL), "read %s", path);
    GString *s = g_string_new_len(json ? json : "", json ? (gssize)n : 0);
    if (from) g_string_replace(s, from, to, 1);
    if (cut && cut < s->len) g_string_truncate(s, cut);
    CHECK(g_file_set_contents(path, s->str, (gssize)s->len, NULL), "write %s", path);
    h3_engine *e = NULL;
    h3_status st = {0};
    h3_status_code rc = open_engine(dir, NULL, &e, &st);
    CHECK(rc == H3_ERR_FORMAT && !e && strstr(st.message, "tokenizer.json"), "tokenizer %s: rc %d '%s'",
          from ? from : "cut", rc, st.message);
    printf("tokenizer.json %s: %s (%s)\n", from ? "changed" : "truncated", st.message, h3_status_code_name(rc));
    h3_engine_close(e);
    g_string_free(s, TRUE);
    g_free(json);
    g_free(path);
    h3_test_remove_tree(dir);
    g_free(dir);
}

/* The advice for a GPU list with compute=cpu is a value the same rules take,
 * and the engine runs it. */
static void test_devices(void) {
    h3_device_list list;
    h3_status st = {0};
    h3_status_code rc = h3_devices_parse("0,0", H3_COMPUTE_CPU, &list, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "devices=cpu:2"), "0,0 with compute=cpu: '%s'",
          st.message);
    printf("devices=0,0 compute=cpu: %s\n", st.message);
    CHECK(h3_devices_parse("0", H3_COMPUTE_CPU, &list, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "devices=cpu:1"),
          "0 with compute=cpu: '%s'", st.message);
    CHECK(h3_devices_parse("cpu:2", H3_COMPUTE_CPU, &list, &st) == H3_OK && list.count == 2 && list.cpu,
          "cpu:2: %s", st.message);
    /* Two ranks on one GPU: refused by the grammar (NCCL would refuse it later). */
    rc = h3_devices_parse("1,1", H3_COMPUTE_CUDA, &list, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "GPU 1 is listed twice"), "1,1: rc %d '%s'", rc,
          st.message);
    h3_engine *e = NULL;
    rc = open_engine(h3_test_data(TINY), "cpu:2", &e, &st);
    CHECK(rc == H3_OK, "the advised devices=cpu:2: %s", st.message);
    if (e) {
        h3_request r = small_request("a red fox runs through fresh snow");
        h3_test_capture c = {0};
        CHECK(h3_test_generate(e, &r, &c, NULL, &st) == H3_OK && c.frames == c.plan.num_frames, "cpu:2: %s",
              st.message);
        h3_test_capture_free(&c);
    }
    h3_engine_close(e);
}

int main(void) {
    h3_engine *e = NULL;
    h3_status st = {0};
    CHECK(open_engine(h3_test_data(TINY), NULL, &e, &st) == H3_OK, "open: %s", st.message);
    if (e) test_long_prompt(e);
    if (e) {
        /* the same while the text encoder's weights are away between requests */
        h3_engine_force_text_release(e, 1);
        h3_request r = small_request("a red fox runs through fresh snow");
        h3_test_capture c = {0};
        CHECK(h3_test_generate(e, &r, &c, NULL, &st) == H3_OK, "generate releasing the text encoder: %s",
              st.message);
        h3_test_capture_free(&c);
        test_long_prompt(e);
    }
    h3_engine_close(e);
    test_tokenizer("\"BPE\"", "\"XYZ\"", 0);
    test_tokenizer("\"NFC\"", "\"NFKD\"", 0);
    test_tokenizer(NULL, NULL, 5000);
    test_devices();
    return h3_test_finish("test_messages");
}
