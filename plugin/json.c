/* JSON: validation, members, quoting. The validator is Go's encoding/json scanner
 * (scanner.go) state for state, so that a config is valid exactly when it was for the Go
 * plugin, and its problem is worded the same. It works byte by byte with an explicit
 * stack of at most JSON_MAX_DEPTH levels: no recursion, whatever the nesting. */
#include "json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* -- UTF-8 ------------------------------------------------------------------------------ */

/* The length of the UTF-8 sequence at s (n > 0 bytes left), 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	if (c < 0xC2 || c > 0xF4)
		return 0; /* a continuation byte, an overlong 2-byte lead, or past U+10FFFF */
	size_t len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xF0 && s[1] < 0x90))
		return 0; /* overlong */
	if (c == 0xED && s[1] > 0x9F)
		return 0; /* a surrogate, U+D800..U+DFFF */
	if (c == 0xF4 && s[1] > 0x8F)
		return 0; /* past U+10FFFF */
	return len;
}

bool json_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		size_t len = utf8_len(u + i, n - i);
		if (len == 0)
			return false;
		i += len;
	}
	return true;
}

static void add_rune(struct buf *out, uint32_t r)
{
	char b[4];
	if (r < 0x80) {
		buf_addc(out, (char)r);
	} else if (r < 0x800) {
		b[0] = (char)(0xC0 | r >> 6);
		b[1] = (char)(0x80 | (r & 0x3F));
		buf_add(out, b, 2);
	} else if (r < 0x10000) {
		b[0] = (char)(0xE0 | r >> 12);
		b[1] = (char)(0x80 | (r >> 6 & 0x3F));
		b[2] = (char)(0x80 | (r & 0x3F));
		buf_add(out, b, 3);
	} else {
		b[0] = (char)(0xF0 | r >> 18);
		b[1] = (char)(0x80 | (r >> 12 & 0x3F));
		b[2] = (char)(0x80 | (r >> 6 & 0x3F));
		b[3] = (char)(0x80 | (r & 0x3F));
		buf_add(out, b, 4);
	}
}

#define REPLACEMENT 0xFFFD

/* -- validation: Go's scanner ---------------------------------------------------------- */

enum { PARSE_OBJECT_KEY, PARSE_OBJECT_VALUE, PARSE_ARRAY_VALUE };

struct scanner;
typedef bool step_fn(struct scanner *s, unsigned char c); /* false: an error */

struct scanner {
	step_fn *step;
	bool end_top; /* the top-level value is complete */
	struct buf *why;
	size_t depth;
	unsigned char states[JSON_MAX_DEPTH + 1]; /* what each open object or array expects */
};

/* c as Go's strconv.Quote writes the character U+00cc, between single quotes. */
static void quote_char(struct buf *out, unsigned char c)
{
	static const char hex[] = "0123456789abcdef";
	static const char shorts[] = "\a\b\f\n\r\t\v", names[] = "abfnrtv";
	buf_addc(out, '\'');
	const char *sh = c ? memchr(shorts, c, sizeof shorts - 1) : NULL;
	if (c == '\'' || c == '\\') {
		buf_addc(out, '\\');
		buf_addc(out, (char)c);
	} else if (sh != NULL) {
		buf_addc(out, '\\');
		buf_addc(out, names[sh - shorts]);
	} else if (c < 0x20 || c == 0x7F) {
		buf_addf(out, "\\x%c%c", hex[c >> 4], hex[c & 0xF]);
	} else if (c < 0x7F || (c > 0xA0 && c != 0xAD)) {
		add_rune(out, c); /* printable (as Latin-1: Go reads the byte as a rune) */
	} else {
		buf_addf(out, "\\u00%c%c", hex[c >> 4], hex[c & 0xF]);
	}
	buf_addc(out, '\'');
}

static bool fail(struct scanner *s, unsigned char c, const char *context)
{
	buf_adds(s->why, "invalid character ");
	quote_char(s->why, c);
	buf_addc(s->why, ' ');
	buf_adds(s->why, context);
	return false;
}

static bool is_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_hex(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static step_fn begin_value_or_empty, begin_value, begin_string_or_empty, begin_string,
	end_value, end_top, in_string, in_string_esc, esc_u, esc_u1, esc_u12, esc_u123, neg,
	num1, num0, dot, dot0, exp_e, exp_sign, exp0, lit_t, lit_tr, lit_tru, lit_f, lit_fa,
	lit_fal, lit_fals, lit_n, lit_nu, lit_nul;

static bool push(struct scanner *s, unsigned char c, unsigned char state)
{
	if (s->depth == JSON_MAX_DEPTH)
		return fail(s, c, "exceeded max depth");
	s->states[s->depth++] = state;
	return true;
}

static void pop(struct scanner *s)
{
	if (--s->depth == 0) {
		s->step = end_top;
		s->end_top = true;
	} else {
		s->step = end_value;
	}
}

static bool begin_value_or_empty(struct scanner *s, unsigned char c)
{
	if (is_space(c))
		return true;
	if (c == ']')
		return end_value(s, c);
	return begin_value(s, c);
}

static bool begin_value(struct scanner *s, unsigned char c)
{
	if (is_space(c))
		return true;
	switch (c) {
	case '{':
		s->step = begin_string_or_empty;
		return push(s, c, PARSE_OBJECT_KEY);
	case '[':
		s->step = begin_value_or_empty;
		return push(s, c, PARSE_ARRAY_VALUE);
	case '"':
		s->step = in_string;
		return true;
	case '-':
		s->step = neg;
		return true;
	case '0':
		s->step = num0;
		return true;
	case 't':
		s->step = lit_t;
		return true;
	case 'f':
		s->step = lit_f;
		return true;
	case 'n':
		s->step = lit_n;
		return true;
	}
	if (c >= '1' && c <= '9') {
		s->step = num1;
		return true;
	}
	return fail(s, c, "looking for beginning of value");
}

static bool begin_string_or_empty(struct scanner *s, unsigned char c)
{
	if (is_space(c))
		return true;
	if (c == '}') {
		s->states[s->depth - 1] = PARSE_OBJECT_VALUE;
		return end_value(s, c);
	}
	return begin_string(s, c);
}

static bool begin_string(struct scanner *s, unsigned char c)
{
	if (is_space(c))
		return true;
	if (c == '"') {
		s->step = in_string;
		return true;
	}
	return fail(s, c, "looking for beginning of object key string");
}

static bool end_value(struct scanner *s, unsigned char c)
{
	if (s->depth == 0) {
		s->step = end_top;
		s->end_top = true;
		return end_top(s, c);
	}
	if (is_space(c)) {
		s->step = end_value;
		return true;
	}
	unsigned char *state = &s->states[s->depth - 1];
	switch (*state) {
	case PARSE_OBJECT_KEY:
		if (c == ':') {
			*state = PARSE_OBJECT_VALUE;
			s->step = begin_value;
			return true;
		}
		return fail(s, c, "after object key");
	case PARSE_OBJECT_VALUE:
		if (c == ',') {
			*state = PARSE_OBJECT_KEY;
			s->step = begin_string;
			return true;
		}
		if (c == '}') {
			pop(s);
			return true;
		}
		return fail(s, c, "after object key:value pair");
	default:
		if (c == ',') {
			s->step = begin_value;
			return true;
		}
		if (c == ']') {
			pop(s);
			return true;
		}
		return fail(s, c, "after array element");
	}
}

static bool end_top(struct scanner *s, unsigned char c)
{
	return is_space(c) || fail(s, c, "after top-level value");
}

static bool in_string(struct scanner *s, unsigned char c)
{
	if (c == '"') {
		s->step = end_value;
		return true;
	}
	if (c == '\\') {
		s->step = in_string_esc;
		return true;
	}
	return c >= 0x20 || fail(s, c, "in string literal");
}

static bool in_string_esc(struct scanner *s, unsigned char c)
{
	if (c != '\0' && strchr("bfnrt\\/\"", c) != NULL) {
		s->step = in_string;
		return true;
	}
	if (c == 'u') {
		s->step = esc_u;
		return true;
	}
	return fail(s, c, "in string escape code");
}

static bool hex_then(struct scanner *s, unsigned char c, step_fn *next)
{
	if (is_hex(c)) {
		s->step = next;
		return true;
	}
	return fail(s, c, "in \\u hexadecimal character escape");
}

static bool esc_u(struct scanner *s, unsigned char c) { return hex_then(s, c, esc_u1); }
static bool esc_u1(struct scanner *s, unsigned char c) { return hex_then(s, c, esc_u12); }
static bool esc_u12(struct scanner *s, unsigned char c) { return hex_then(s, c, esc_u123); }
static bool esc_u123(struct scanner *s, unsigned char c) { return hex_then(s, c, in_string); }

static bool neg(struct scanner *s, unsigned char c)
{
	if (c == '0') {
		s->step = num0;
		return true;
	}
	if (c >= '1' && c <= '9') {
		s->step = num1;
		return true;
	}
	return fail(s, c, "in numeric literal");
}

static bool num1(struct scanner *s, unsigned char c)
{
	if (c >= '0' && c <= '9')
		return true;
	return num0(s, c);
}

static bool num0(struct scanner *s, unsigned char c)
{
	if (c == '.') {
		s->step = dot;
		return true;
	}
	if (c == 'e' || c == 'E') {
		s->step = exp_e;
		return true;
	}
	return end_value(s, c);
}

static bool dot(struct scanner *s, unsigned char c)
{
	if (c >= '0' && c <= '9') {
		s->step = dot0;
		return true;
	}
	return fail(s, c, "after decimal point in numeric literal");
}

static bool dot0(struct scanner *s, unsigned char c)
{
	if (c >= '0' && c <= '9')
		return true;
	if (c == 'e' || c == 'E') {
		s->step = exp_e;
		return true;
	}
	return end_value(s, c);
}

static bool exp_e(struct scanner *s, unsigned char c)
{
	if (c == '+' || c == '-') {
		s->step = exp_sign;
		return true;
	}
	return exp_sign(s, c);
}

static bool exp_sign(struct scanner *s, unsigned char c)
{
	if (c >= '0' && c <= '9') {
		s->step = exp0;
		return true;
	}
	return fail(s, c, "in exponent of numeric literal");
}

static bool exp0(struct scanner *s, unsigned char c)
{
	if (c >= '0' && c <= '9')
		return true;
	return end_value(s, c);
}

/* One letter of true, false or null: c must be want, then next. */
static bool letter(struct scanner *s, unsigned char c, char want, step_fn *next,
		   const char *context)
{
	if (c == want) {
		s->step = next;
		return true;
	}
	return fail(s, c, context);
}

static bool lit_t(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'r', lit_tr, "in literal true (expecting 'r')");
}
static bool lit_tr(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'u', lit_tru, "in literal true (expecting 'u')");
}
static bool lit_tru(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'e', end_value, "in literal true (expecting 'e')");
}
static bool lit_f(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'a', lit_fa, "in literal false (expecting 'a')");
}
static bool lit_fa(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'l', lit_fal, "in literal false (expecting 'l')");
}
static bool lit_fal(struct scanner *s, unsigned char c)
{
	return letter(s, c, 's', lit_fals, "in literal false (expecting 's')");
}
static bool lit_fals(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'e', end_value, "in literal false (expecting 'e')");
}
static bool lit_n(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'u', lit_nu, "in literal null (expecting 'u')");
}
static bool lit_nu(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'l', lit_nul, "in literal null (expecting 'l')");
}
static bool lit_nul(struct scanner *s, unsigned char c)
{
	return letter(s, c, 'l', end_value, "in literal null (expecting 'l')");
}

bool json_check(const char *text, size_t n, struct buf *why, size_t *offset)
{
	static struct scanner s; /* 10 KB of states: not on the stack */
	const unsigned char *u = (const unsigned char *)text;
	s.step = begin_value;
	s.end_top = false;
	s.depth = 0;
	s.why = why;
	for (size_t i = 0; i < n; i++) {
		if (s.step == in_string) { /* the bulk of a config: its strings' plain bytes */
			while (i < n && u[i] >= 0x20 && u[i] != '"' && u[i] != '\\')
				i++;
			if (i == n)
				break;
		}
		if (!s.step(&s, u[i])) {
			*offset = i + 1;
			return false;
		}
	}
	/* The end: a space completes a number ("1") or shows what is missing ("tru"). */
	if (s.end_top)
		return true;
	bool stepped = s.step(&s, ' ');
	if (stepped && s.end_top)
		return true;
	if (stepped) /* not complete, and no byte was wrong */
		buf_adds(why, "unexpected end of JSON input");
	*offset = n;
	return false;
}

/* -- members of a valid text -------------------------------------------------------------- */

static size_t skip_space(struct bytes s, size_t i)
{
	while (i < s.len && is_space((unsigned char)s.p[i]))
		i++;
	return i;
}

/* The end of the string token at i (just past its closing quote). */
static size_t string_end(struct bytes s, size_t i)
{
	for (i++; s.p[i] != '"'; i++)
		if (s.p[i] == '\\')
			i++;
	return i + 1;
}

/* The end of the value at i: valid JSON, so brackets and quotes need only be counted. */
static size_t value_end(struct bytes s, size_t i)
{
	char c = s.p[i];
	if (c == '"')
		return string_end(s, i);
	if (c != '{' && c != '[') { /* a number, true, false or null */
		while (i < s.len && strchr(",]} \t\r\n", s.p[i]) == NULL)
			i++;
		return i;
	}
	size_t depth = 0;
	do {
		c = s.p[i];
		if (c == '"') {
			i = string_end(s, i);
			continue;
		}
		if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
		i++;
	} while (depth > 0);
	return i;
}

bool json_object_members(struct bytes s, struct json_member **members, size_t *count)
{
	size_t i = skip_space(s, 0), n = 0, cap = 0;
	struct json_member *list = NULL;
	if (i == s.len || s.p[i] != '{')
		return false;
	i = skip_space(s, i + 1);
	while (s.p[i] != '}') {
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			list = must_alloc(reallocarray(list, cap, sizeof *list));
		}
		struct json_member *m = &list[n++];
		size_t end = string_end(s, i);
		m->key = (struct buf){0};
		json_unquote(&m->key, (struct bytes){s.p + i, end - i});
		i = skip_space(s, skip_space(s, end) + 1); /* past the ':' */
		end = value_end(s, i);
		m->value = (struct bytes){s.p + i, end - i};
		i = skip_space(s, end);
		if (s.p[i] == ',')
			i = skip_space(s, i + 1);
	}
	*members = list;
	*count = n;
	return true;
}

struct bytes json_get(const struct json_member *members, size_t count, const char *key)
{
	struct bytes found = {NULL, 0};
	for (size_t i = 0; i < count; i++)
		if (bytes_is(buf_bytes(&members[i].key), key))
			found = members[i].value;
	return found;
}

/* -- strings --------------------------------------------------------------------------- */

/* The 4 hex digits of a \uXXXX escape at s (n bytes left), or -1 when there is none. */
static long u4(const char *s, size_t n)
{
	if (n < 6 || s[0] != '\\' || s[1] != 'u')
		return -1;
	long r = 0;
	for (int i = 2; i < 6; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		r = r * 16 + d;
	}
	return r;
}

void json_unquote(struct buf *out, struct bytes tok)
{
	const char *s = tok.p + 1;
	size_t n = tok.len - 2;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c != '\\') {
			size_t run = i;
			while (run < n && s[run] != '\\' && (unsigned char)s[run] < 0x80)
				run++;
			if (run > i) { /* plain ASCII */
				buf_add(out, s + i, run - i);
				i = run;
				continue;
			}
			size_t len = utf8_len((const unsigned char *)s + i, n - i);
			if (len == 0) {
				add_rune(out, REPLACEMENT);
				i++;
			} else {
				buf_add(out, s + i, len);
				i += len;
			}
			continue;
		}
		char e = s[i + 1];
		const char *plain = strchr("\"\\/bfnrt", e);
		if (plain != NULL) {
			buf_addc(out, "\"\\/\b\f\n\r\t"[plain - "\"\\/bfnrt"]);
			i += 2;
			continue;
		}
		long r = u4(s + i, n - i);
		i += 6;
		if (r >= 0xD800 && r < 0xE000) { /* a surrogate: whole only as a pair */
			long low = u4(s + i, n - i);
			if (r < 0xDC00 && low >= 0xDC00 && low < 0xE000) {
				r = 0x10000 + ((r - 0xD800) << 10) + (low - 0xDC00);
				i += 6;
			} else {
				r = REPLACEMENT;
			}
		}
		add_rune(out, (uint32_t)r);
	}
}

void json_quote(struct buf *out, struct bytes str, bool html)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str.p;
	size_t n = str.len, start = 0;
	buf_addc(out, '"');
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		if (c < 0x80) {
			if (c >= 0x20 && c != '"' && c != '\\' &&
			    !(html && (c == '<' || c == '>' || c == '&'))) {
				i++;
				continue;
			}
			buf_add(out, s + start, i - start);
			buf_addc(out, '\\');
			switch (c) {
			case '"':
			case '\\':
				buf_addc(out, (char)c);
				break;
			case '\n':
				buf_addc(out, 'n');
				break;
			case '\r':
				buf_addc(out, 'r');
				break;
			case '\t':
				buf_addc(out, 't');
				break;
			default:
				buf_addf(out, "u00%c%c", hex[c >> 4], hex[c & 0xF]);
			}
			start = ++i;
			continue;
		}
		size_t len = utf8_len(s + i, n - i);
		if (len == 0) {
			buf_add(out, s + start, i - start);
			buf_adds(out, "\\ufffd");
			start = ++i;
			continue;
		}
		/* U+2028 and U+2029: valid JSON, but not in JavaScript strings */
		if (len == 3 && c == 0xE2 && s[i + 1] == 0x80 && (s[i + 2] & 0xFE) == 0xA8) {
			buf_add(out, s + start, i - start);
			buf_addf(out, "\\u202%c", hex[s[i + 2] & 0xF]);
			start = i += 3;
			continue;
		}
		i += len;
	}
	buf_add(out, s + start, n - start);
	buf_addc(out, '"');
}
