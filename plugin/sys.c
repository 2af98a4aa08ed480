#include "sys.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* -- system errors ---------------------------------------------------------------------- */

const char *errno_text(int e)
{
	static char text[128];
	/* Go's table is the C library's, lower-cased, but for these */
	if (e == EDOTDOT)
		return "RFS specific error";
	if (e == ESTALE)
		return "stale NFS file handle";
	const char *s = e > 0 && e < EHWPOISON ? strerror(e) : "Unknown error";
	if (strncmp(s, "Unknown error", 13) == 0) {
		snprintf(text, sizeof text, "errno %d", e);
		return text;
	}
	snprintf(text, sizeof text, "%s", s);
	text[0] = (char)tolower((unsigned char)text[0]);
	return text;
}

/* -- path names (Go's path/filepath, on Unix) --------------------------------------------- */

void path_clean(struct buf *out, struct bytes path)
{
	const char *p = path.p;
	size_t n = path.len, base = out->len, r = 0, dotdot = 0;
	bool rooted = n > 0 && p[0] == '/';
	if (rooted) {
		buf_addc(out, '/');
		r = dotdot = 1;
	}
	while (r < n) {
		if (p[r] == '/') {
			r++; /* an empty element */
		} else if (p[r] == '.' && (r + 1 == n || p[r + 1] == '/')) {
			r++; /* "." */
		} else if (p[r] == '.' && p[r + 1] == '.' && (r + 2 == n || p[r + 2] == '/')) {
			r += 2; /* "..": drop the last element written, if any */
			size_t w = out->len - base;
			if (w > dotdot) {
				w--;
				while (w > dotdot && out->p[base + w] != '/')
					w--;
				out->len = base + w;
			} else if (!rooted) { /* nothing to drop: keep it */
				if (w > 0)
					buf_addc(out, '/');
				buf_adds(out, "..");
				dotdot = out->len - base;
			}
		} else { /* an element: copy it */
			size_t w = out->len - base;
			if (w != (rooted ? 1u : 0u))
				buf_addc(out, '/');
			for (; r < n && p[r] != '/'; r++)
				buf_addc(out, p[r]);
		}
	}
	if (out->len == base)
		buf_addc(out, '.');
}

void path_dir(struct buf *out, struct bytes path)
{
	size_t i = path.len;
	while (i > 0 && path.p[i - 1] != '/')
		i--;
	path_clean(out, (struct bytes){path.p, i});
}

void path_base(struct buf *out, const char *path)
{
	size_t n = strlen(path);
	if (n == 0) {
		buf_addc(out, '.');
		return;
	}
	while (n > 0 && path[n - 1] == '/')
		n--;
	if (n == 0) {
		buf_addc(out, '/');
		return;
	}
	size_t i = n;
	while (i > 0 && path[i - 1] != '/')
		i--;
	buf_add(out, path + i, n - i);
}

void path_join(struct buf *out, struct bytes dir, const char *name)
{
	struct buf joined = {0};
	buf_add(&joined, dir.p, dir.len);
	if (dir.len > 0)
		buf_addc(&joined, '/');
	buf_adds(&joined, name);
	path_clean(out, buf_bytes(&joined));
	free(joined.p);
}

/* -- durations (Go's time.Duration.String) ---------------------------------------------- */

/* The fraction of v/10^prec, its trailing zeros left out, written before buf[w]. */
static size_t put_frac(char *buf, size_t w, uint64_t *v, int prec)
{
	bool print = false;
	for (int i = 0; i < prec; i++) {
		unsigned digit = (unsigned)(*v % 10);
		print = print || digit != 0;
		if (print)
			buf[--w] = (char)('0' + digit);
		*v /= 10;
	}
	if (print)
		buf[--w] = '.';
	return w;
}

static size_t put_int(char *buf, size_t w, uint64_t v)
{
	do {
		buf[--w] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	return w;
}

void duration_text(struct buf *out, int64_t d)
{
	char buf[32];
	size_t w = sizeof buf;
	uint64_t u = d < 0 ? 0 - (uint64_t)d : (uint64_t)d;
	if (u == 0) {
		buf_adds(out, "0s");
		return;
	}
	if (u < 1000000000) { /* under a second: in ns, µs or ms, with a fraction */
		int prec;
		buf[--w] = 's';
		if (u < 1000) {
			prec = 0;
			buf[--w] = 'n';
		} else if (u < 1000000) {
			prec = 3;
			w -= 2;
			memcpy(buf + w, "\xc2\xb5", 2); /* µ */
		} else {
			prec = 6;
			buf[--w] = 'm';
		}
		w = put_frac(buf, w, &u, prec);
		w = put_int(buf, w, u);
	} else { /* hours, minutes, seconds with a fraction: "1h2m3.5s" */
		buf[--w] = 's';
		w = put_frac(buf, w, &u, 9);
		w = put_int(buf, w, u % 60);
		u /= 60;
		if (u > 0) {
			buf[--w] = 'm';
			w = put_int(buf, w, u % 60);
			u /= 60;
			if (u > 0) {
				buf[--w] = 'h';
				w = put_int(buf, w, u);
			}
		}
	}
	if (d < 0)
		buf[--w] = '-';
	buf_add(out, buf + w, sizeof buf - w);
}

/* -- numbers (Go's strconv.ParseFloat) ---------------------------------------------------- */

static bool is_digit(char c, bool hex)
{
	char l = (char)(c | 0x20);
	return (c >= '0' && c <= '9') || (hex && l >= 'a' && l <= 'f');
}

/* Underscores only between digits, or between a base prefix and a digit. */
static bool underscores_ok(const char *s)
{
	char saw = '^'; /* the last seen: ^ the start, 0 a digit or prefix, _, ! anything else */
	bool hex = false;
	if (*s == '+' || *s == '-')
		s++;
	if (s[0] == '0' && s[1] != '\0' && strchr("box", s[1] | 0x20) != NULL) {
		hex = (s[1] | 0x20) == 'x';
		saw = '0';
		s += 2;
	}
	for (; *s != '\0'; s++) {
		if (is_digit(*s, hex)) {
			saw = '0';
		} else if (*s == '_') {
			if (saw != '0')
				return false;
			saw = '_';
		} else {
			if (saw == '_')
				return false;
			saw = '!';
		}
	}
	return saw != '_';
}

bool parse_float(const char *s, double *out)
{
	const char *t = s + (*s == '+' || *s == '-');
	if (strcasecmp(t, "inf") == 0 || strcasecmp(t, "infinity") == 0) {
		*out = *s == '-' ? -INFINITY : INFINITY;
		return true;
	}
	if (strcasecmp(s, "nan") == 0) {
		*out = NAN;
		return true;
	}
	/* [sign] digits [. digits] [e [sign] digits], or 0x hex digits [. hex] p [sign] digits */
	size_t n = strlen(s), i = (size_t)(t - s);
	bool hex = s[i] == '0' && (s[i + 1] | 0x20) == 'x' && i + 2 < n;
	bool dot = false, digits = false, underscores = false;
	if (hex)
		i += 2;
	for (; i < n; i++) {
		if (s[i] == '_') {
			underscores = true;
		} else if (s[i] == '.' && !dot) {
			dot = true;
		} else if (is_digit(s[i], hex)) {
			digits = true;
		} else {
			break;
		}
	}
	if (!digits)
		return false;
	if (i < n && (s[i] | 0x20) == (hex ? 'p' : 'e')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || s[i] < '0' || s[i] > '9')
			return false;
		for (; i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_'); i++)
			underscores = underscores || s[i] == '_';
	} else if (hex) {
		return false; /* a hexadecimal mantissa needs its exponent */
	}
	if (i != n || (underscores && !underscores_ok(s)))
		return false;
	char *plain = malloc(n + 1), *w = plain;
	if (plain == NULL)
		return false;
	for (i = 0; i < n; i++)
		if (s[i] != '_')
			*w++ = s[i];
	*w = '\0';
	double v = strtod(plain, NULL); /* correctly rounded, as Go's; an underflow is 0 */
	free(plain);
	if (isinf(v))
		return false; /* out of range */
	*out = v;
	return true;
}
