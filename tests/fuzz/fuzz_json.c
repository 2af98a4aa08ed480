/* libFuzzer target: the plugin's JSON (plugin/json.c) on any bytes, as stdin and the
 * daemon's answer reach it. Besides the sanitizers' reports, what must hold:
 *
 * - json_check refuses with a reason and an offset within the text, or accepts;
 * - of an accepted object, json_object_members gives members whose values are each valid
 *   JSON lying within the text, keys that are UTF-8, the same again for nested objects,
 *   and json_get the last member of a name;
 * - json_unquote of any string token gives UTF-8;
 * - json_quote of any bytes gives a valid JSON string of UTF-8, which json_unquote turns
 *   back into those bytes when they were UTF-8. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "json.h"

#define NESTING 32 /* how deep the members of nested objects are taken apart */

static bool same(struct bytes a, struct bytes b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void quoted_and_back(struct bytes x, bool html)
{
	struct buf q = {0}, why = {0}, back = {0};
	size_t at;
	json_quote(&q, x, html);
	CHECK(q.len >= 2 && q.p[0] == '"' && q.p[q.len - 1] == '"');
	CHECK(json_check(q.p, q.len, &why, &at));
	CHECK(json_utf8_valid(q.p, q.len));
	json_unquote(&back, buf_bytes(&q));
	CHECK(json_utf8_valid(back.p, back.len));
	if (json_utf8_valid(x.p, x.len))
		CHECK(same(buf_bytes(&back), x));
}

static void members(struct bytes text, int depth)
{
	struct json_member *m;
	size_t n;
	if (!json_object_members(text, &m, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		struct bytes v = m[i].value;
		struct buf why = {0};
		size_t at;
		CHECK(v.len > 0 && v.p >= text.p && v.p + v.len <= text.p + text.len);
		CHECK(json_check(v.p, v.len, &why, &at));
		CHECK(json_utf8_valid(m[i].key.p, m[i].key.len));
		if (v.p[0] == '"') {
			struct buf s = {0};
			json_unquote(&s, v);
			CHECK(json_utf8_valid(s.p, s.len));
		} else if (v.p[0] == '{' && depth < NESTING) {
			members(v, depth + 1);
		}
		/* json_get: the last member of the name (for the first few: it is a loop) */
		struct bytes key = buf_bytes(&m[i].key);
		if (i < 8 && (key.len == 0 || memchr(key.p, '\0', key.len) == NULL)) {
			size_t last = i;
			for (size_t j = i + 1; j < n; j++)
				if (same(buf_bytes(&m[j].key), key))
					last = j;
			struct bytes got = json_get(m, n, buf_str(&m[i].key));
			CHECK(got.p == m[last].value.p && got.len == m[last].value.len);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The plugin's texts are never NULL (stdin is read into a buffer; an answer is
	 * allocated): nor is an empty input here. */
	struct bytes in = {size ? (const char *)data : "", size};
	struct buf why = {0};
	size_t at = SIZE_MAX;
	(void)json_utf8_valid(in.p, in.len);
	if (json_check(in.p, in.len, &why, &at)) {
		CHECK(why.len == 0);
		members(in, 0);
	} else {
		CHECK(why.len > 0 && at <= in.len);
	}
	quoted_and_back(in, size & 1);
	arena_release(size);
	return 0;
}
