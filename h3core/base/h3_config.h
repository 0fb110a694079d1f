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

#endif
