/* h3_config.h - reading component config.json files (json-glib underneath)
 * with errors that name the file and the key. */
#ifndef H3_CONFIG_H
#define H3_CONFIG_H

#include <stdint.h>

#include "base/h3_status.h"

typedef struct h3_config h3_config;

h3_status_code h3_config_load(const char *path, h3_config **out, h3_status *status);
/* Parses a JSON object from memory; name is used in messages. */
h3_status_code h3_config_parse(const char *json, const char *name, h3_config **out, h3_status *status);
void h3_config_free(h3_config *c);
const char *h3_config_path(const h3_config *c);

int h3_config_has(const h3_config *c, const char *key);
/* key may be a dotted path into nested objects ("text_config.hidden_size"). */
h3_status_code h3_config_int(const h3_config *c, const char *key, int64_t *out, h3_status *status);
h3_status_code h3_config_double(const h3_config *c, const char *key, double *out, h3_status *status);
h3_status_code h3_config_bool(const h3_config *c, const char *key, int *out, h3_status *status);
/* Returned string is owned by the config. */
h3_status_code h3_config_string(const h3_config *c, const char *key, const char **out, h3_status *status);
/* Array of numbers: fills up to max values, *n = array length (error if > max). */
h3_status_code h3_config_int_array(const h3_config *c, const char *key, int64_t *out, int max, int *n,
                                   h3_status *status);
h3_status_code h3_config_double_array(const h3_config *c, const char *key, double *out, int max, int *n,
                                      h3_status *status);
/* Optional variants: leave *out untouched when the key is absent or null. */
h3_status_code h3_config_int_or(const h3_config *c, const char *key, int64_t *out, h3_status *status);
h3_status_code h3_config_double_or(const h3_config *c, const char *key, double *out, h3_status *status);

/* Ranges. Every integer a loader takes from a model folder has a documented
 * [min, max] (docs/RELIABILITY.md, "Ranges and files"): small enough that
 * the sizes computed from it fit (h3_size.h) and an allocation it drives is
 * sane, so a hostile value is an error naming it, never a wrapped int, a
 * zero divisor or "out of memory". Out of range is H3_ERR_FORMAT
 *   "<file>: \"<key>\" is <value>, outside [min, max]". */
h3_status_code h3_config_check_range(const char *file, const char *key, int64_t value, int64_t min, int64_t max,
                                     h3_status *status);
h3_status_code h3_config_int_range(const h3_config *c, const char *key, int64_t min, int64_t max, int64_t *out,
                                   h3_status *status);
/* Absent or null: *out untouched (the caller's default). */
h3_status_code h3_config_int_range_or(const h3_config *c, const char *key, int64_t min, int64_t max, int64_t *out,
                                      h3_status *status);
/* Every entry in [min, max]; the message names the entry ("key[2]"). */
h3_status_code h3_config_int_array_range(const h3_config *c, const char *key, int64_t min, int64_t max, int64_t *out,
                                         int max_n, int *n, h3_status *status);
/* Doubles: [min, max] (a value past float's range would become inf). */
h3_status_code h3_config_double_range_or(const h3_config *c, const char *key, double min, double max, double *out,
                                         h3_status *status);

#endif
