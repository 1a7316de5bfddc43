// The benchmark plugin in C, the twin of tests/plugins/bench (Rust): `bench.checksum`
// computes the FNV-1a checksum of the payload, `bench.imports` calls `lifecycle.interrupted`
// as many times as the payload says.

#include <stdlib.h>
#include <string.h>

#include "handler.h"

typedef exports_cairn_plugin_handler_plugin_error_t plugin_error;

// Keeps the checksum from being optimised away.
volatile uint64_t bench_sink;

static uint64_t fnv1a(const uint8_t *bytes, size_t len) {
    uint64_t value = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        value ^= bytes[i];
        value *= 0x100000001b3ull;
    }
    return value;
}

static bool is_topic(const handler_string_t *topic, const char *name) {
    return topic->len == strlen(name) && memcmp(topic->ptr, name, topic->len) == 0;
}

bool exports_cairn_plugin_handler_plugin_init(exports_cairn_plugin_handler_plugin_json_t *config,
                                              plugin_error *err) {
    (void)err;
    exports_cairn_plugin_handler_plugin_json_free(config);
    return true;
}

bool exports_cairn_plugin_handler_plugin_on_event(exports_cairn_plugin_handler_plugin_event_t *event,
                                                  plugin_error *err) {
    bool ok = true;
    if (is_topic(&event->topic, "bench.checksum")) {
        bench_sink = fnv1a(event->payload.ptr, event->payload.len);
    } else if (is_topic(&event->topic, "bench.imports")) {
        char digits[24] = {0};
        size_t n = event->payload.len < sizeof digits - 1 ? event->payload.len : sizeof digits - 1;
        memcpy(digits, event->payload.ptr, n);
        unsigned long long count = strtoull(digits, NULL, 10);
        for (unsigned long long i = 0; i < count; i++) bench_sink += cairn_plugin_lifecycle_interrupted();
    } else {
        err->tag = CAIRN_PLUGIN_TYPES_ERROR_INVALID_INPUT;
        handler_string_dup(&err->val.invalid_input, "unknown bench topic");
        ok = false;
    }
    exports_cairn_plugin_handler_plugin_event_free(event);
    return ok;
}
