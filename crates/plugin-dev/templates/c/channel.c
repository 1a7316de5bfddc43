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

static void log_info(const char *text) {
    channel_string_t message;
    channel_string_set(&message, text);
    cairn_plugin_log_log(CAIRN_PLUGIN_TYPES_LOG_LEVEL_INFO, &message);
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
