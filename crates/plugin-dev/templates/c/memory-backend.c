// The {{id}} memory backend. Every call answers `unavailable` until you give it a store:
// Cairn uses it when cairn.yaml says `memory: {backend: {{id}}}`. Build with
// `cairn plugin build .`: Cairn writes the bindings (build/bindings/memory_backend.h) from
// wit/ and makes the component.

#include <stdio.h>

#include "memory_backend.h"

typedef exports_cairn_plugin_memory_backend_plugin_error_t error_t;

static bool not_yet(error_t *err, const char *call) {
    char text[160];
    snprintf(text, sizeof text, "{{id}} does not implement %s yet (plugin.c)", call);
    err->tag = CAIRN_PLUGIN_TYPES_ERROR_UNAVAILABLE;
    memory_backend_string_dup(&err->val.unavailable, text);
    return false;
}

bool exports_cairn_plugin_memory_backend_plugin_init(
    exports_cairn_plugin_memory_backend_plugin_json_t *config, error_t *err) {
    (void)err;
    exports_cairn_plugin_memory_backend_plugin_json_free(config);
    return true;
}

bool exports_cairn_plugin_memory_backend_plugin_store_entry(
    exports_cairn_plugin_memory_backend_plugin_new_memory_t *entry, memory_backend_string_t *ret,
    error_t *err) {
    (void)ret;
    exports_cairn_plugin_memory_backend_plugin_new_memory_free(entry);
    return not_yet(err, "store-entry");
}

bool exports_cairn_plugin_memory_backend_plugin_recall(
    exports_cairn_plugin_memory_backend_plugin_recall_query_t *query,
    exports_cairn_plugin_memory_backend_plugin_list_recall_hit_t *ret, error_t *err) {
    (void)ret;
    exports_cairn_plugin_memory_backend_plugin_recall_query_free(query);
    return not_yet(err, "recall");
}

bool exports_cairn_plugin_memory_backend_plugin_get(
    memory_backend_string_t *id, exports_cairn_plugin_memory_backend_plugin_memory_entry_t *ret,
    error_t *err) {
    (void)ret;
    memory_backend_string_free(id);
    return not_yet(err, "get");
}

bool exports_cairn_plugin_memory_backend_plugin_list_entries(
    exports_cairn_plugin_memory_backend_plugin_memory_scope_t *scope,
    exports_cairn_plugin_memory_backend_plugin_list_memory_kind_t *kinds, uint32_t limit,
    exports_cairn_plugin_memory_backend_plugin_list_memory_entry_t *ret, error_t *err) {
    (void)limit;
    (void)ret;
    exports_cairn_plugin_memory_backend_plugin_memory_scope_free(scope);
    exports_cairn_plugin_memory_backend_plugin_list_memory_kind_free(kinds);
    return not_yet(err, "list-entries");
}

bool exports_cairn_plugin_memory_backend_plugin_forget(memory_backend_string_t *id, bool *ret,
                                                       error_t *err) {
    (void)ret;
    memory_backend_string_free(id);
    return not_yet(err, "forget");
}

bool exports_cairn_plugin_memory_backend_plugin_count(
    exports_cairn_plugin_memory_backend_plugin_memory_scope_t *scope, uint64_t *ret,
    error_t *err) {
    (void)ret;
    exports_cairn_plugin_memory_backend_plugin_memory_scope_free(scope);
    return not_yet(err, "count");
}

bool exports_cairn_plugin_memory_backend_plugin_health(memory_backend_string_t *ret,
                                                       error_t *err) {
    (void)ret;
    return not_yet(err, "a store");
}
