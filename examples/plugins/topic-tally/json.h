// A small reader for the flat JSON objects Cairn hands this plugin (event payloads and the
// manifest's config): find a top-level field and read it as a string or an integer.
#ifndef TOPIC_TALLY_JSON_H
#define TOPIC_TALLY_JSON_H

#include <stdbool.h>
#include <stddef.h>

// The top-level string field `key` of the object in `json` (`len` bytes), unescaped into a
// new NUL-terminated buffer the caller frees; NULL when absent, not a string or malformed.
char *json_string_field(const char *json, size_t len, const char *key);

// The top-level integer field `key` into `out`; false when absent or not an integer.
bool json_int_field(const char *json, size_t len, const char *key, long long *out);

// Append `text` to `out` (capacity `cap`, NUL-terminated) as a JSON string literal;
// false when it does not fit.
bool json_quote(char *out, size_t cap, const char *text);

#endif
