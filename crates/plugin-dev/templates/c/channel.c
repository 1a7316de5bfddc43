// The {{id}} channel: POST /channels/{{id}}/<conversation> with a text body (header
// x-sender names who sent it) puts a message into Cairn's buffer; replies are logged.
// Build with `cairn plugin build .`: Cairn writes the bindings (build/bindings/channel.h)
// from wit/ and makes the component.
//
// Ownership, as wit-bindgen's C bindings have it: arguments handed to an export are the
// plugin's to free; what an export returns is freed by the bindings after the host read
// it (so it must be malloc'd); strings set with channel_string_set borrow,
// channel_string_dup copies.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"

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
    channel_string_t message;
    message.ptr = (uint8_t *)text;
    message.len = whole_utf8(text, strlen(text));
    cairn_plugin_log_log(CAIRN_PLUGIN_TYPES_LOG_LEVEL_INFO, &message);
}

// Whether `bytes` (len of them) are UTF-8: a message's text must be, and a request body can
// hold anything.
static bool is_utf8(const uint8_t *bytes, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = bytes[i];
        size_t more;
        uint8_t low = 0x80, high = 0xBF;  // the range of the byte after the first
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            low = c == 0xE0 ? 0xA0 : low;   // no overlong forms
            high = c == 0xED ? 0x9F : high; // no surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            low = c == 0xF0 ? 0x90 : low;
            high = c == 0xF4 ? 0x8F : high; // nothing past U+10FFFF
        } else {
            return false;
        }
        if (len - i <= more || bytes[i + 1] < low || bytes[i + 1] > high) return false;
        for (size_t k = 2; k <= more; k++) {
            if ((bytes[i + k] & 0xC0) != 0x80) return false;
        }
        i += more + 1;
    }
    return true;
}

// `text` (len bytes) as a JSON object {"text": ...}, malloc'd and NUL-terminated.
static char *text_payload(const uint8_t *text, size_t len) {
    char *out = malloc(len * 6 + 16);
    size_t n = (size_t)sprintf(out, "{\"text\":\"");
    for (size_t i = 0; i < len; i++) {
        uint8_t c = text[i];
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)sprintf(out + n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    strcpy(out + n, "\"}");
    return out;
}

static void respond(exports_cairn_plugin_channel_plugin_http_response_t *ret, uint16_t status,
                    const char *body) {
    ret->status = status;
    ret->headers.len = 1;
    ret->headers.ptr = malloc(sizeof *ret->headers.ptr);
    channel_string_dup(&ret->headers.ptr[0].f0, "content-type");
    channel_string_dup(&ret->headers.ptr[0].f1, "application/json");
    ret->body.len = strlen(body);
    ret->body.ptr = malloc(ret->body.len);
    memcpy(ret->body.ptr, body, ret->body.len);
}

bool exports_cairn_plugin_channel_plugin_init(exports_cairn_plugin_channel_plugin_json_t *config,
                                              exports_cairn_plugin_channel_plugin_error_t *err) {
    (void)err;
    char line[256];
    snprintf(line, sizeof line, "{{id}} started with config %.*s", (int)config->len,
             (const char *)config->ptr);
    log_info(line);
    exports_cairn_plugin_channel_plugin_json_free(config);
    return true;
}

bool exports_cairn_plugin_channel_plugin_poll(exports_cairn_plugin_channel_plugin_error_t *err) {
    (void)err;
    return true;
}

bool exports_cairn_plugin_channel_plugin_deliver(
    exports_cairn_plugin_channel_plugin_outbound_message_t *message,
    exports_cairn_plugin_channel_plugin_error_t *err) {
    (void)err;
    char line[1024];
    snprintf(line, sizeof line, "reply to %.*s: %.*s", (int)message->conversation.len,
             (const char *)message->conversation.ptr, (int)message->payload.len,
             (const char *)message->payload.ptr);
    log_info(line);
    exports_cairn_plugin_channel_plugin_outbound_message_free(message);
    return true;
}

void exports_cairn_plugin_channel_plugin_handle_webhook(
    exports_cairn_plugin_channel_plugin_http_request_t *request,
    exports_cairn_plugin_channel_plugin_http_response_t *ret) {
    cairn_plugin_buffer_inbound_message_t message = {0};
    channel_string_set(&message.sender, "anonymous");
    for (size_t i = 0; i < request->headers.len; i++) {
        channel_string_t *name = &request->headers.ptr[i].f0;
        if (name->len == 8 && memcmp(name->ptr, "x-sender", 8) == 0) {
            message.sender = request->headers.ptr[i].f1;
        }
    }
    message.conversation = request->path;
    while (message.conversation.len > 0 && message.conversation.ptr[0] == '/') {
        message.conversation.ptr++;
        message.conversation.len--;
    }
    if (message.conversation.len == 0) {
        channel_string_set(&message.conversation, "default");
    }
    if (!is_utf8(request->body.ptr, request->body.len)) {
        respond(ret, 400, "{\"error\":\"expected a UTF-8 text body\"}");
        exports_cairn_plugin_channel_plugin_http_request_free(request);
        return;
    }
    char *payload = text_payload(request->body.ptr, request->body.len);
    channel_string_set(&message.payload, payload);
    uint64_t id;
    cairn_plugin_buffer_error_t error;
    char body[64];
    if (cairn_plugin_buffer_push(&message, &id, &error)) {
        snprintf(body, sizeof body, "{\"id\":%llu}", (unsigned long long)id);
        respond(ret, 202, body);
    } else {
        cairn_plugin_buffer_error_free(&error);
        respond(ret, 400, "{\"error\":\"the buffer refused the message\"}");
    }
    free(payload);
    exports_cairn_plugin_channel_plugin_http_request_free(request);
}
