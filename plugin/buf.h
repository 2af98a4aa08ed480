/* A growable byte string: what the plugin builds its frame, its messages and its answers
 * in. Bytes, not C strings: a config's values may hold NUL (a "\u0000" escape), and they
 * travel on as they are. The plugin is one short exec, so nothing is freed; when memory
 * runs out it stops there (as Go's runtime did: a message on stderr, exit 2). */
#ifndef NETCTL_BUF_H
#define NETCTL_BUF_H

#include <stddef.h>

struct buf {
	char *p;
	size_t len, cap;
};

/* A view of bytes someone else owns: a member of stdin, a path. */
struct bytes {
	const char *p;
	size_t len;
};

void buf_add(struct buf *b, const void *p, size_t n);
void buf_adds(struct buf *b, const char *s);
void buf_addc(struct buf *b, char c);
void buf_addf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* b's bytes followed by a NUL (not counted in len), for the C library's calls. */
const char *buf_str(struct buf *b);
struct bytes buf_bytes(const struct buf *b);

void *must_alloc(void *p);

/* The bytes of a C string. */
struct bytes cbytes(const char *s);
int bytes_is(struct bytes b, const char *s);

#endif
