// Topic tally: for every `message.received` event, counts once per message each word the
// user wrote (words of `min_length` or more letters, common words left out), keeps the
// tallies in the host's kv store, and emits `topic.trending` {"user", "word", "messages"}
// each time a word's tally reaches another multiple of `threshold`.
//
// Redelivery is harmless: each tally remembers the last event it counted (`<n> <seq>`), so
// an event delivered again after a failure or crash counts no word twice.
//
// Ownership, as wit-bindgen's C bindings have it: arguments handed to an export are the
// plugin's to free; what an import returns is the caller's to free; strings set with
// handler_string_set borrow, handler_string_dup copies.

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"
#include "json.h"

typedef exports_cairn_plugin_handler_plugin_error_t plugin_error;

static long long threshold = 3;
static long long min_length = 4;

static const char *const COMMON_WORDS[] = {
    "about", "after", "again", "also", "been", "before", "being", "could", "does", "doing",
    "from", "have", "hello", "here", "into", "just", "know", "like", "make", "many", "more",
    "most", "much", "need", "only", "other", "over", "please", "really", "same", "should",
    "some", "such", "than", "thank", "thanks", "that", "their", "them", "then", "there",
    "these", "they", "thing", "think", "this", "those", "very", "want", "what", "when",
    "where", "which", "while", "will", "with", "would", "your", "yours",
};

static void log_at(cairn_plugin_types_log_level_t level, const char *text) {
    handler_string_t message;
    handler_string_set(&message, text);
    cairn_plugin_log_log(level, &message);
}

// How many bytes of `text` (n bytes of UTF-8) fit in `most` without cutting a character
// (the host takes only whole UTF-8 strings, a kv key included).
static size_t utf8_prefix(const char *text, size_t n, size_t most) {
    if (n <= most) return n;
    while (most > 0 && ((unsigned char)text[most] & 0xC0) == 0x80) most--;
    return most;
}

// Report an error from an export (the host frees the copy); the event will be retried.
static bool fail(plugin_error *err, const char *what, cairn_plugin_types_error_t *cause) {
    char text[256];
    snprintf(text, sizeof text, "%s failed (host error %d)", what, cause ? (int)cause->tag : -1);
    if (cause) cairn_plugin_types_error_free(cause);
    err->tag = CAIRN_PLUGIN_TYPES_ERROR_INTERNAL;
    handler_string_dup(&err->val.internal, text);
    return false;
}

static bool is_common(const char *word) {
    for (size_t i = 0; i < sizeof COMMON_WORDS / sizeof *COMMON_WORDS; i++)
        if (strcmp(word, COMMON_WORDS[i]) == 0) return true;
    return false;
}

// Letters (ASCII and any UTF-8 sequence) and inner apostrophes make words.
static bool is_word_byte(unsigned char c) { return isalpha(c) || c >= 0x80; }

bool exports_cairn_plugin_handler_plugin_init(exports_cairn_plugin_handler_plugin_json_t *config,
                                              plugin_error *err) {
    const char *json = (const char *)config->ptr;
    long long value;
    bool ok = true;
    if (json_int_field(json, config->len, "threshold", &value)) {
        if (value < 1) ok = false; else threshold = value;
    }
    if (ok && json_int_field(json, config->len, "min_length", &value)) {
        if (value < 1 || value > 40) ok = false; else min_length = value;
    }
    exports_cairn_plugin_handler_plugin_json_free(config);
    if (!ok) {
        err->tag = CAIRN_PLUGIN_TYPES_ERROR_INVALID_INPUT;
        handler_string_dup(&err->val.invalid_input,
                           "config: threshold must be at least 1, min_length 1 to 40");
        return false;
    }
    char line[128];
    snprintf(line, sizeof line, "topic-tally: trending every %lld messages, words of %lld+ letters",
             threshold, min_length);
    log_at(CAIRN_PLUGIN_TYPES_LOG_LEVEL_INFO, line);
    return true;
}

// Announce that `user` has mentioned `word` in `messages` messages.
static bool announce(const char *user, const char *word, unsigned long long messages,
                     plugin_error *err) {
    char payload[512] = "{\"user\":";
    if (!json_quote(payload, sizeof payload, user)) return true;  // an absurd user id: skip
    strcat(payload, ",\"word\":");
    if (!json_quote(payload, sizeof payload, word)) return true;
    size_t n = strlen(payload);
    snprintf(payload + n, sizeof payload - n, ",\"messages\":%llu}", messages);
    handler_string_t topic, body;
    handler_string_set(&topic, "topic.trending");
    handler_string_set(&body, payload);
    uint64_t seq;
    cairn_plugin_journal_error_t emit_error;
    if (!cairn_plugin_journal_emit(&topic, &body, &seq, &emit_error))
        return fail(err, "journal emit", &emit_error);
    char line[600];
    snprintf(line, sizeof line, "trending for %s: \"%s\" in %llu messages (event #%llu)", user,
             word, messages, (unsigned long long)seq);
    log_at(CAIRN_PLUGIN_TYPES_LOG_LEVEL_INFO, line);
    return true;
}

// Count `word` once for event `seq`; announce it at each multiple of the threshold.
static bool tally(const char *user, const char *word, uint64_t seq, plugin_error *err) {
    char key_text[256];
    if ((size_t)snprintf(key_text, sizeof key_text, "count/%s/%s", user, word) >= sizeof key_text)
        return true;  // too long to be a topic
    handler_string_t key;
    handler_string_set(&key, key_text);
    handler_option_list_u8_t stored;
    cairn_plugin_kv_error_t kv_error;
    if (!cairn_plugin_kv_get(&key, &stored, &kv_error)) return fail(err, "kv get", &kv_error);
    unsigned long long messages = 0, last_seq = 0;
    if (stored.is_some) {
        char text[48] = {0};
        size_t n = stored.val.len < sizeof text - 1 ? stored.val.len : sizeof text - 1;
        memcpy(text, stored.val.ptr, n);
        sscanf(text, "%llu %llu", &messages, &last_seq);
        handler_option_list_u8_free(&stored);
    }
    if (last_seq >= seq) return true;  // this message already counted it
    messages++;
    char value_text[48];
    int length = snprintf(value_text, sizeof value_text, "%llu %llu", messages,
                          (unsigned long long)seq);
    handler_list_u8_t value = {(uint8_t *)value_text, (size_t)length};
    if (!cairn_plugin_kv_set(&key, &value, &kv_error)) return fail(err, "kv set", &kv_error);
    if (messages % (unsigned long long)threshold == 0) return announce(user, word, messages, err);
    return true;
}

// Tally every topic word of `text` (modified in place: lower-cased, split).
static bool tally_words(const char *user, char *text, uint64_t seq, plugin_error *err) {
    char *p = text;
    while (*p) {
        while (*p && !is_word_byte((unsigned char)*p)) p++;
        char *start = p;
        while (*p && (is_word_byte((unsigned char)*p) ||
                      (*p == '\'' && is_word_byte((unsigned char)p[1]))))
            p++;
        char *end = p;
        if (*p) p++;
        *end = '\0';
        size_t letters = 0;
        for (char *q = start; q < end; q++) {
            *q = (char)tolower((unsigned char)*q);
            if (((unsigned char)*q & 0xC0) != 0x80) letters++;  // count characters, not bytes
        }
        if ((long long)letters < min_length || is_common(start)) continue;
        if (!tally(user, start, seq, err)) return false;
    }
    return true;
}

bool exports_cairn_plugin_handler_plugin_on_event(exports_cairn_plugin_handler_plugin_event_t *event,
                                                  plugin_error *err) {
    char *text = json_string_field((const char *)event->payload.ptr, event->payload.len, "text");
    char *sender = json_string_field((const char *)event->payload.ptr, event->payload.len, "sender");
    char user[128] = "unknown";
    if (event->user_id.is_some) {
        const char *id = (const char *)event->user_id.val.ptr;
        size_t n = utf8_prefix(id, event->user_id.val.len, sizeof user - 1);
        memcpy(user, id, n);
        user[n] = '\0';
    } else if (sender) {
        size_t n = utf8_prefix(sender, strlen(sender), sizeof user - 1);
        memcpy(user, sender, n);
        user[n] = '\0';
    }
    bool ok = true;
    if (text) {
        ok = tally_words(user, text, event->seq, err);
    } else {
        log_at(CAIRN_PLUGIN_TYPES_LOG_LEVEL_WARN, "message.received without a text field: skipped");
    }
    free(text);
    free(sender);
    exports_cairn_plugin_handler_plugin_event_free(event);
    return ok;
}
