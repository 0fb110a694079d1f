/* test_request.c - the request schema (engine/h3_request.c): every row is
 * well formed (a unique name and option, a default inside its own range,
 * choices with unique nicks), the defaults of h3_request_default and
 * h3_engine_options_default are the rows', every value formats and parses
 * back to itself, the range of each row is the one its parse and the
 * request check apply (vsa-sparsity: [0, 0.99], one range, one default),
 * and text that is not a value of its row is refused by name; a list row
 * (lora) appends, formats with its escapes and parses back, and the lora
 * item grammar (h3_lora_spec_parse) with its refusals. */
#include "h3.h"
#include "h3_test.h"

#include <stdint.h>

static void *home_of(const h3_param *p, h3_request *r, h3_engine_options *o) {
    return p->home == H3_PARAM_IN_REQUEST ? (void *)r : (void *)o;
}

static void test_rows(void) {
    h3_request r = h3_request_default();
    h3_engine_options o = h3_engine_options_default();
    int n = 0;
    for (const h3_param *p = h3_params(); p->name; p++, n++) {
        h3_status st = {0};
        CHECK(p->title && p->doc && *p->doc, "%s: no title or doc", p->name);
        CHECK(p->home == H3_PARAM_IN_REQUEST || p->home == H3_PARAM_IN_OPTIONS, "%s: home %d", p->name, p->home);
        CHECK(h3_param_find(NULL, p->name) == p, "%s: find", p->name);
        CHECK(h3_param_find_option(NULL, p->option ? p->option : p->name) == p, "%s: option", p->name);
        for (const h3_param *q = h3_params(); q < p; q++) {
            CHECK(strcmp(q->name, p->name) != 0, "%s twice", p->name);
            CHECK(strcmp(q->option ? q->option : q->name, p->option ? p->option : p->name) != 0,
                  "option of %s twice", p->name);
        }
        void *home = home_of(p, &r, &o);
        CHECK(h3_param_is_default(p, home), "%s: h3_*_default does not hold the row's default", p->name);
        /* the default is inside the row's own range (prompt has none) */
        if (p->check == NULL || p->type != H3_PARAM_STRING)
            CHECK(h3_param_check_value(p, home, &st) == H3_OK, "%s: default out of range: %s", p->name, st.message);
        if (p->type == H3_PARAM_ENUM) {
            CHECK(p->choices && p->choices[0].nick, "%s: no choices", p->name);
            for (const h3_param_choice *c = p->choices; c && c->nick; c++) {
                CHECK(h3_param_choice_by_nick(p, c->nick) == c && h3_param_choice_by_value(p, c->value) == c,
                      "%s: choice %s not unique", p->name, c->nick);
                CHECK(c->doc && *c->doc, "%s=%s: no doc", p->name, c->nick);
            }
        }
    }
    CHECK(n >= 20, "only %d rows", n);
    printf("schema: %d rows, each with one name, one option, its default in range\n", n);
}

/* Every row: the default formats and parses back to itself; a value at
 * each end of the range too. */
static void test_round_trip(void) {
    for (const h3_param *p = h3_params(); p->name; p++) {
        h3_request r = h3_request_default(), r2 = h3_request_default();
        h3_engine_options o = h3_engine_options_default(), o2 = h3_engine_options_default();
        void *home = home_of(p, &r, &o), *home2 = home_of(p, &r2, &o2);
        h3_status st = {0};
        if (p->type == H3_PARAM_INT || p->type == H3_PARAM_UINT)
            *(int *)h3_param_field(p, home) = (int)p->umax;
        else if (p->type == H3_PARAM_UINT64 || p->type == H3_PARAM_BYTES)
            *(uint64_t *)h3_param_field(p, home) = p->umax;
        else if (p->type == H3_PARAM_FLOAT)
            *(float *)h3_param_field(p, home) = (float)p->real_max;
        else if (p->type == H3_PARAM_STRING)
            *(const char **)h3_param_field(p, home) = "a value, with spaces";
        char *text = h3_param_format(p, home);
        CHECK(text != NULL, "%s: format", p->name);
        if (!text) continue;
        CHECK(h3_param_parse(p, text, 0, home2, &st) == H3_OK, "%s '%s': %s", p->name, text, st.message);
        char *again = h3_param_format(p, home2);
        CHECK(again && strcmp(again, text) == 0, "%s: '%s' came back as '%s'", p->name, text, again);
        free(again);
        free(text);
    }
    printf("schema: every row's value formats and parses back to itself\n");
}

static void expect_refused(const char *name, const char *text, const char *want) {
    h3_request r = h3_request_default();
    h3_engine_options o = h3_engine_options_default();
    const h3_param *p = h3_param_find(NULL, name);
    h3_status st = {0};
    CHECK(p, "no row %s", name);
    if (!p) return;
    h3_request before = r;
    h3_engine_options obefore = o;
    h3_status_code rc = h3_param_parse(p, text, 0, home_of(p, &r, &o), &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, name) && strstr(st.message, want),
          "%s '%s': rc %d '%s' (want '%s')", name, text, rc, st.message, want);
    CHECK(memcmp(&before, &r, sizeof r) == 0 && memcmp(&obefore, &o, sizeof o) == 0, "%s '%s' changed the field",
          name, text);
}

static void test_refusals(void) {
    expect_refused("seed", "-1", "0..18446744073709551615");      /* not 2^64-1 */
    expect_refused("seed", "18446744073709551616", "0..");         /* overflow */
    expect_refused("seed", " 7", "integer");
    expect_refused("seed", "7 ", "integer");
    expect_refused("seed", "+7", "integer");
    expect_refused("seed", "", "integer");
    expect_refused("width", "4128", "32..4096");
    expect_refused("width", "0x40", "integer");
    expect_refused("num-frames", "363", "(15 s at 24 fps)");
    expect_refused("steps", "-1", "0..1000");
    expect_refused("vsa-sparsity", "1", "[0, 0.99]");
    expect_refused("vsa-sparsity", "0.995", "[0, 0.99]");
    expect_refused("vsa-sparsity", "nan", "[0, 0.99]");
    expect_refused("vsa-sparsity", "-0.1", "[0, 0.99]");
    expect_refused("backend", "dense", "fa or vsa");
    expect_refused("memory", "offload", "auto, resident or stream");
    expect_refused("compute", "gpu", "auto, cpu, cuda or cuda-f32");
    expect_refused("max-gpu-memory", "-5", "integer");
    printf("schema: bad text refused by name, field untouched\n");
}

/* One range: the parse's bound is the request check's bound. */
static void test_one_range(void) {
    h3_request r = h3_request_default();
    r.prompt = "a fox";
    h3_status st = {0};
    CHECK(h3_request_check(&r, &st) == H3_OK, "default request: %s", st.message);
    CHECK(r.vsa_sparsity == 0.9f, "vsa-sparsity default %g", (double)r.vsa_sparsity);
    const h3_param *sp = h3_param_find(NULL, "vsa-sparsity");
    CHECK(h3_param_parse(sp, "0.99", 0, &r, &st) == H3_OK && h3_request_check(&r, &st) == H3_OK,
          "0.99 parses and checks: %s", st.message);
    r.vsa_sparsity = 0.991f;
    CHECK(h3_request_check(&r, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "vsa-sparsity") &&
              strstr(st.message, "[0, 0.99]"),
          "0.991 refused by the check with the parse's range: %s", st.message);
    r = h3_request_default();
    r.prompt = "a fox";
    r.steps = 1001;
    CHECK(h3_request_check(&r, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "steps 1001: must be 0..1000"),
          "steps: %s", st.message);
    r.steps = 0;
    r.attention = (h3_attention_mode)7;
    CHECK(h3_request_check(&r, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "backend 7: expected fa or vsa"),
          "backend: %s", st.message);

    h3_engine_options o = h3_engine_options_default();
    CHECK(h3_engine_options_check(&o, &st) == H3_OK, "default options: %s", st.message);
    o.devices = "0,0";
    CHECK(h3_engine_options_check(&o, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "listed twice"),
          "devices through the grammar: %s", st.message);
    o = h3_engine_options_default();
    o.memory = (h3_memory_mode)9;
    CHECK(h3_engine_options_check(&o, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "memory 9"),
          "memory: %s", st.message);
    /* the enum names are the rows' choices */
    CHECK(!strcmp(h3_memory_mode_name(H3_MEMORY_STREAM), "stream") && !strcmp(h3_precision_name(H3_PRECISION_FP8), "fp8"),
          "names");
    h3_memory_mode m;
    CHECK(h3_memory_mode_parse("offload", &m, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "memory 'offload'"),
          "memory parse: %s", st.message);
    /* h3-generate's GiB */
    o = h3_engine_options_default();
    CHECK(h3_param_parse(h3_param_find(NULL, "max-gpu-memory"), "1.5", H3_PARSE_GIB, &o, &st) == H3_OK &&
              o.max_gpu_memory == 1610612736ull,
          "1.5 GiB: %llu", (unsigned long long)o.max_gpu_memory);
    printf("schema: one range per parameter, applied by the parse and the checks\n");
}

static void check_spec(const char *item, const char *path, float strength) {
    char *p = NULL;
    float v = -100;
    h3_status st = {0};
    CHECK(h3_lora_spec_parse(item, &p, &v, &st) == H3_OK, "lora '%s': %s", item, st.message);
    CHECK(p && strcmp(p, path) == 0 && v == strength, "lora '%s': path '%s' strength %g", item, p ? p : "", v);
    free(p);
}

static void spec_refused(const char *item, const char *want) {
    h3_status st = {0};
    char *p = NULL;
    CHECK(h3_lora_spec_parse(item, &p, NULL, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, want) && !p,
          "lora '%s' accepted or '%s' lacks '%s'", item, st.message, want);
}

/* The list row: one item per parse, escapes, the round trip, the free. */
static void test_lists(void) {
    const h3_param *p = h3_param_find(NULL, "lora");
    CHECK(p && p->type == H3_PARAM_STRV, "no lora list row");
    if (!p) return;
    h3_engine_options o = h3_engine_options_default(), o2 = h3_engine_options_default();
    h3_status st = {0};
    CHECK(h3_param_parse(p, "a.safetensors:0.5", 0, &o, &st) == H3_OK, "parse: %s", st.message);
    CHECK(h3_param_parse(p, "b\\,c.safetensors:2", 0, &o, &st) == H3_OK, "parse: %s", st.message);
    CHECK(o.loras && o.loras[0] && o.loras[1] && !o.loras[2] && strcmp(o.loras[0], "a.safetensors:0.5") == 0 &&
          strcmp(o.loras[1], "b,c.safetensors:2") == 0, "two parses are not two items");
    CHECK(!h3_param_is_default(p, &o), "a list of two is the default");
    char *text = h3_param_format(p, &o);
    CHECK(text && strcmp(text, "a.safetensors:0.5,b\\,c.safetensors:2") == 0, "format '%s'", text);
    CHECK(h3_param_parse(p, text, 0, &o2, &st) == H3_OK, "parse back: %s", st.message);
    char *again = h3_param_format(p, &o2);
    CHECK(again && text && strcmp(again, text) == 0, "'%s' came back as '%s'", text, again);
    free(text);
    free(again);
    CHECK(h3_engine_options_check(&o, &st) == H3_OK, "two files: %s", st.message);
    o.precision = H3_PRECISION_FP8;
    CHECK(h3_engine_options_check(&o, &st) != H3_OK && strstr(st.message, "lora") &&
          strstr(st.message, "precision=fp8"), "lora with fp8: '%s'", st.message);
    o.precision = H3_PRECISION_BF16;
    CHECK(h3_param_parse(p, "./x.safetensors,a.safetensors:1", 0, &o, &st) == H3_OK, "parse: %s", st.message);
    CHECK(h3_engine_options_check(&o, &st) != H3_OK && strstr(st.message, "listed twice"),
          "a path twice: '%s'", st.message);
    h3_param_free_value(p, &o);
    h3_param_free_value(p, &o2);
    CHECK(o.loras == NULL && h3_param_is_default(p, &o), "free_value leaves a list");
    expect_refused("lora", "x.safetensors:abc", "not a number");
    expect_refused("lora", "x.safetensors:17", "[-16, 16]");
    expect_refused("lora", "a\\qb", "must escape");
    expect_refused("lora", "a,,b", "no path");
    check_spec("x.safetensors", "x.safetensors", 1.0f);
    check_spec("x.safetensors:0.6", "x.safetensors", 0.6f);
    check_spec("x.safetensors:-16", "x.safetensors", -16.0f);
    check_spec("/data/v1:2/x.safetensors", "/data/v1:2/x.safetensors", 1.0f);
    check_spec("a:b.safetensors:1", "a:b.safetensors", 1.0f);
    spec_refused("x.safetensors:abc", "not a number");
    spec_refused("x.safetensors:", "not a number");
    spec_refused("x.safetensors: 1", "not a number");
    spec_refused("x.safetensors:inf", "not a number");
    spec_refused("x.safetensors:16.5", "[-16, 16]");
    spec_refused(":1", "no path");
    spec_refused("", "no path");
    printf("schema: the lora list appends, escapes and parses back; its item grammar\n");
}

int main(void) {
    test_rows();
    test_round_trip();
    test_refusals();
    test_one_range();
    test_lists();
    return h3_test_finish("test_request");
}
