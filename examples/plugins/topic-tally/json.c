// See json.h. A scanner over one object: enough for Cairn's payloads, not a general parser.

#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *at;
    const char *end;
} cursor;

static void skip_space(cursor *c) {
    while (c->at < c->end && (*c->at == ' ' || *c->at == '\n' || *c->at == '\r' || *c->at == '\t'))
        c->at++;
}

static unsigned hex4(const char *p) {
    unsigned value = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        value <<= 4;
        if (h >= '0' && h <= '9') value |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f') value |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') value |= (unsigned)(h - 'A' + 10);
        else return 0xFFFFFFFFu;
    }
    return value;
}

// Write code point `cp` as UTF-8; returns the bytes written.
static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// Read the string literal at the cursor; into `out` (NULL to skip). False when malformed.
static bool read_string(cursor *c, char *out, size_t *out_len) {
    if (c->at >= c->end || *c->at != '"') return false;
    c->at++;
    size_t n = 0;
    while (c->at < c->end && *c->at != '"') {
        char ch = *c->at++;
        if (ch != '\\') {
            if (out) out[n] = ch;
            n++;
            continue;
        }
        if (c->at >= c->end) return false;
        char esc = *c->at++;
        char plain = 0;
        switch (esc) {
            case '"': plain = '"'; break;
            case '\\': plain = '\\'; break;
            case '/': plain = '/'; break;
            case 'b': plain = '\b'; break;
            case 'f': plain = '\f'; break;
            case 'n': plain = '\n'; break;
            case 'r': plain = '\r'; break;
            case 't': plain = '\t'; break;
            case 'u': {
                if (c->end - c->at < 4) return false;
                unsigned cp = hex4(c->at);
                if (cp == 0xFFFFFFFFu) return false;
                c->at += 4;
                bool high = cp >= 0xD800 && cp < 0xDC00;
                if (high && c->end - c->at >= 6 && c->at[0] == '\\' && c->at[1] == 'u') {
                    unsigned low = hex4(c->at + 2);
                    if (low >= 0xDC00 && low < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        c->at += 6;
                    }
                }
                char utf8[4];
                size_t k = put_utf8(utf8, cp);
                if (out) memcpy(out + n, utf8, k);
                n += k;
                continue;
            }
            default: return false;
        }
        if (out) out[n] = plain;
        n++;
    }
    if (c->at >= c->end) return false;
    c->at++;
    if (out_len) *out_len = n;
    return true;
}

// Skip any value: a string, or everything up to the next `,` or `}` at this depth.
static bool skip_value(cursor *c) {
    skip_space(c);
    if (c->at < c->end && *c->at == '"') return read_string(c, NULL, NULL);
    int depth = 0;
    while (c->at < c->end) {
        char ch = *c->at;
        if (ch == '"') {
            if (!read_string(c, NULL, NULL)) return false;
            continue;
        }
        if (ch == '{' || ch == '[') depth++;
        else if (ch == '}' || ch == ']') {
            if (depth == 0) return true;
            depth--;
        } else if (ch == ',' && depth == 0) return true;
        c->at++;
    }
    return false;
}

// Move the cursor to the value of top-level field `key`; false when absent or malformed.
static bool find_field(cursor *c, const char *key) {
    skip_space(c);
    if (c->at >= c->end || *c->at != '{') return false;
    c->at++;
    size_t key_len = strlen(key);
    char name[64];
    for (;;) {
        skip_space(c);
        if (c->at < c->end && *c->at == '}') return false;
        // Field names longer than any key we look for are skipped, not copied.
        cursor probe = *c;
        size_t n = 0;
        if (!read_string(&probe, NULL, &n)) return false;
        bool match = false;
        if (n < sizeof name) {
            read_string(c, name, NULL);
            match = n == key_len && memcmp(name, key, n) == 0;
        } else {
            *c = probe;
        }
        skip_space(c);
        if (c->at >= c->end || *c->at != ':') return false;
        c->at++;
        skip_space(c);
        if (match) return true;
        if (!skip_value(c)) return false;
        skip_space(c);
        if (c->at < c->end && *c->at == ',') c->at++;
    }
}

char *json_string_field(const char *json, size_t len, const char *key) {
    cursor c = {json, json + len};
    if (!find_field(&c, key)) return NULL;
    cursor probe = c;
    size_t n = 0;
    if (!read_string(&probe, NULL, &n)) return NULL;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    read_string(&c, out, NULL);
    out[n] = '\0';
    return out;
}

bool json_int_field(const char *json, size_t len, const char *key, long long *out) {
    cursor c = {json, json + len};
    if (!find_field(&c, key)) return false;
    char digits[24];
    size_t n = 0;
    while (c.at < c.end && n < sizeof digits - 1 && (*c.at == '-' || (*c.at >= '0' && *c.at <= '9')))
        digits[n++] = *c.at++;
    digits[n] = '\0';
    if (n == 0) return false;
    char *rest = NULL;
    *out = strtoll(digits, &rest, 10);
    return rest && *rest == '\0';
}

bool json_quote(char *out, size_t cap, const char *text) {
    size_t n = strlen(out);
    if (n + 1 >= cap) return false;
    out[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        char escaped[8];
        size_t k;
        if (*p == '"' || *p == '\\') {
            escaped[0] = '\\';
            escaped[1] = (char)*p;
            k = 2;
        } else if (*p < 0x20) {
            k = (size_t)snprintf(escaped, sizeof escaped, "\\u%04x", *p);
        } else {
            escaped[0] = (char)*p;
            k = 1;
        }
        if (n + k + 2 > cap) return false;
        memcpy(out + n, escaped, k);
        n += k;
    }
    out[n++] = '"';
    out[n] = '\0';
    return true;
}
