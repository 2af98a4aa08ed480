/* The plugin frees nothing by design: it is one short exec, and its exit frees what it
 * used (plugin/main.c, plugin/buf.h). A fuzz target calls its functions millions of times
 * in one process, so here the end of each input plays the exit: every block the plugin's
 * code allocated while the input ran is freed by arena_release. AddressSanitizer still
 * sees each block as its own allocation (its bounds, use after free, double free), and
 * LeakSanitizer still looks at whatever is allocated outside these calls.
 *
 * What a one-shot process must keep instead is memory in proportion to its input: the
 * most the blocks held at once during an input is checked against 64 bytes per input byte
 * plus 1 MiB (a buffer grows by doubling, a frame quotes a byte into at most 6, a member
 * of an object costs its key and a list entry), and more aborts, which libFuzzer reports
 * with the input. */
#include "arena.h"

/* the C library's own, here (the Makefile's -include of arena.h renamed them) */
#undef malloc
#undef calloc
#undef realloc
#undef reallocarray
#undef free

#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct block {
	void *p;
	size_t n;
};

static struct block *blocks;
static size_t count, cap, held, peak;

static void track(void *p, size_t n)
{
	if (count == cap) {
		cap = cap ? 2 * cap : 1024;
		blocks = realloc(blocks, cap * sizeof *blocks);
		if (blocks == NULL)
			abort();
	}
	blocks[count++] = (struct block){p, n};
	held += n;
	if (held > peak)
		peak = held;
}

/* The index of p's block (the latest first: a buffer grows while it is the newest). */
static size_t find(const void *p)
{
	for (size_t i = count; i > 0; i--)
		if (blocks[i - 1].p == p)
			return i - 1;
	fprintf(stderr, "arena: %p was not allocated by the plugin's code\n", p);
	abort();
}

static void untrack(size_t i)
{
	held -= blocks[i].n;
	blocks[i] = blocks[--count];
}

void *arena_malloc(size_t n)
{
	void *p = malloc(n);
	if (p != NULL)
		track(p, n);
	return p;
}

void *arena_calloc(size_t c, size_t size)
{
	void *p = calloc(c, size);
	if (p != NULL)
		track(p, c * size); /* calloc refused an overflowing product */
	return p;
}

void *arena_realloc(void *p, size_t n)
{
	if (p == NULL)
		return arena_malloc(n);
	if (n == 0) { /* glibc's realloc frees p then */
		arena_free(p);
		return NULL;
	}
	size_t i = find(p);
	void *q = realloc(p, n);
	if (q == NULL)
		return NULL; /* p is still allocated, still tracked */
	untrack(i);
	track(q, n);
	return q;
}

void *arena_reallocarray(void *p, size_t c, size_t size)
{
	if (size != 0 && c > SIZE_MAX / size)
		return NULL; /* as reallocarray: ENOMEM, p untouched */
	return arena_realloc(p, c * size);
}

void arena_free(void *p)
{
	if (p == NULL)
		return;
	untrack(find(p));
	free(p);
}

void arena_release(size_t input_len)
{
	size_t most = peak, limit = 64 * input_len + (1u << 20);
	for (size_t i = 0; i < count; i++)
		free(blocks[i].p);
	count = held = peak = 0;
	if (most > limit) {
		fprintf(stderr, "arena: an input of %zu bytes made the plugin hold %zu bytes at "
			"once (more than %zu)\n", input_len, most, limit);
		abort();
	}
}
