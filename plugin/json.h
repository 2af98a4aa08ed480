/* JSON as the plugin needs it: strict validation (RFC 8259, as Go's json.Valid, with its
 * error messages), an object's members with each value as written, strings quoted and
 * unquoted. No tree is built: stdin goes to the daemon as it came, and the plugin reads
 * only a few of its members. */
#ifndef NETCTL_JSON_H
#define NETCTL_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

/* The nesting a text may have (Go's encoding/json's limit): deeper is invalid. */
#define JSON_MAX_DEPTH 10000

/* Whether s is UTF-8: no invalid or overlong sequence, no surrogate, nothing past
 * U+10FFFF. */
bool json_utf8_valid(const char *s, size_t n);

/* Whether s is one JSON value (whitespace around it allowed). When not, why is what Go's
 * decoder says ("invalid character 'x' looking for beginning of value") and *offset how
 * many bytes it had read (the offending byte's included; 0 for an empty text). The bytes
 * of strings are not checked for UTF-8 here: json_utf8_valid does that. */
bool json_check(const char *s, size_t n, struct buf *why, size_t *offset);

/* An object member: its key (unescaped) and its value exactly as written. */
struct json_member {
	struct buf key;
	struct bytes value;
};

/* The members of the object s (a text json_check accepted), in order, duplicates and
 * all; false when s is another kind of value. */
bool json_object_members(struct bytes s, struct json_member **members, size_t *count);

/* The value of the last member named key (the one a decoder keeps); {NULL, 0} if none. */
struct bytes json_get(const struct json_member *members, size_t count, const char *key);

/* The string token s (quotes included, valid JSON) unescaped: \uXXXX and surrogate pairs
 * as UTF-8; a lone surrogate, and any byte that is not UTF-8, as U+FFFD. */
void json_unquote(struct buf *out, struct bytes s);

/* s as a JSON string, as Go's encoder writes it: '"', '\' and control characters
 * escaped, U+2028 and U+2029 too, bytes that are not UTF-8 as \ufffd; with html, also
 * '<', '>' and '&' (json.Marshal's default). */
void json_quote(struct buf *out, struct bytes s, bool html);

#endif
