// The {{id}} plugin ({{kind}}): receives the journal events its manifest subscribes to and
// counts them in the host's kv store. Build with `cairn plugin build .`: Cairn writes the
// bindings (build/bindings/handler.h) from wit/ and makes the component.
//
// Ownership, as wit-bindgen's C bindings have it: arguments handed to an export are the
// plugin's to free; what an import returns is the caller's to free; strings set with
// handler_string_set borrow, handler_string_dup copies.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"

// The length of `text` (len bytes) without a UTF-8 character a fixed-size buffer cut
// short at its end: the host takes only whole UTF-8 strings and traps on any other.
static size_t whole_utf8(const char *text, size_t len) {
    size_t start = len;
    while (start > 0 && len - start < 3 && ((unsigned char)text[start - 1] & 0xC0) == 0x80) {
        start--;
    }
    if (start == 0) return len;
    unsigned char lead = (unsigned char)text[start - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return len - (start - 1) < need ? start - 1 : len;
}

// Log `text` (NUL-terminated, perhaps cut short by snprintf).
static void log_info(const char *text) {
    handler_string_t message;
    message.ptr = (uint8_t *)text;
    message.len = whole_utf8(text, strlen(text));
    cairn_plugin_log_log(CAIRN_PLUGIN_TYPES_LOG_LEVEL_INFO, &message);
}

// Report an error from an export; the host frees the copy.
static bool fail(exports_cairn_plugin_handler_plugin_error_t *err, const char *text) {
    err->tag = CAIRN_PLUGIN_TYPES_ERROR_INTERNAL;
    handler_string_dup(&err->val.internal, text);
    return false;
}

bool exports_cairn_plugin_handler_plugin_init(exports_cairn_plugin_handler_plugin_json_t *config,
                                              exports_cairn_plugin_handler_plugin_error_t *err) {
    (void)err;
    char line[256];
    snprintf(line, sizeof line, "{{id}} started with config %.*s", (int)config->len,
             (const char *)config->ptr);
    log_info(line);
    exports_cairn_plugin_handler_plugin_json_free(config);
    return true;
}

bool exports_cairn_plugin_handler_plugin_on_event(exports_cairn_plugin_handler_plugin_event_t *event,
                                                  exports_cairn_plugin_handler_plugin_error_t *err) {
    handler_string_t key;
    handler_string_set(&key, "events");
    handler_option_list_u8_t stored;
    cairn_plugin_kv_error_t kv_error;
    if (!cairn_plugin_kv_get(&key, &stored, &kv_error)) {
        cairn_plugin_kv_error_free(&kv_error);
        exports_cairn_plugin_handler_plugin_event_free(event);
        return fail(err, "kv get failed");
    }
    unsigned long long seen = 1;
    if (stored.is_some) {
        char digits[24] = {0};
        size_t n = stored.val.len < sizeof digits - 1 ? stored.val.len : sizeof digits - 1;
        memcpy(digits, stored.val.ptr, n);
        seen = strtoull(digits, NULL, 10) + 1;
        handler_option_list_u8_free(&stored);
    }
    char digits[24];
    int length = snprintf(digits, sizeof digits, "%llu", seen);
    handler_list_u8_t value = {(uint8_t *)digits, (size_t)length};
    if (!cairn_plugin_kv_set(&key, &value, &kv_error)) {
        cairn_plugin_kv_error_free(&kv_error);
        exports_cairn_plugin_handler_plugin_event_free(event);
        return fail(err, "kv set failed");
    }
    char line[256];
    snprintf(line, sizeof line, "event #%llu: %.*s (seq %llu)", seen, (int)event->topic.len,
             (const char *)event->topic.ptr, (unsigned long long)event->seq);
    log_info(line);
    exports_cairn_plugin_handler_plugin_event_free(event);
    return true;
}
