#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *must_alloc(void *p)
{
	static const char msg[] = "netctl-cni: out of memory\n";
	if (p == NULL) {
		(void)!write(2, msg, sizeof msg - 1);
		_exit(2);
	}
	return p;
}

static void reserve(struct buf *b, size_t more)
{
	if (b->cap - b->len > more)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len <= more) { /* room for the NUL buf_str writes, too */
		if (cap > ((size_t)-1) / 2)
			must_alloc(NULL);
		cap *= 2;
	}
	b->p = must_alloc(realloc(b->p, cap));
	b->cap = cap;
}

void buf_add(struct buf *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	reserve(b, n);
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

void buf_adds(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

void buf_addc(struct buf *b, char c)
{
	reserve(b, 1);
	b->p[b->len++] = c;
}

void buf_addf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n <= 0)
		return;
	reserve(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

const char *buf_str(struct buf *b)
{
	reserve(b, 0);
	b->p[b->len] = '\0';
	return b->p;
}

struct bytes buf_bytes(const struct buf *b)
{
	/* never a null pointer, which an empty buffer has: one may not be offset, nor given
	 * to memcmp, even for 0 bytes (the fuzz targets found both: tests/fuzz/corpus/) */
	return (struct bytes){b->p != NULL ? b->p : "", b->len};
}

struct bytes cbytes(const char *s)
{
	return (struct bytes){s, strlen(s)};
}

int bytes_is(struct bytes b, const char *s)
{
	size_t n = strlen(s);
	return b.len == n && memcmp(b.p, s, n) == 0;
}
