/* The plugin's allocations in the fuzz targets (tests/fuzz/arena.c): the Makefile compiles
 * the plugin's sources for them with -include of this file, so that their malloc, calloc,
 * realloc, reallocarray and free are these. */
#ifndef NETCTL_FUZZ_ARENA_H
#define NETCTL_FUZZ_ARENA_H

#include <stddef.h>
#include <stdlib.h>

void *arena_malloc(size_t n);
void *arena_calloc(size_t count, size_t size);
void *arena_realloc(void *p, size_t n);
void *arena_reallocarray(void *p, size_t count, size_t size);
void arena_free(void *p);

/* The end of one input: everything still allocated is freed; aborts when the most the
 * input's calls held at once was more than 64 bytes per byte of input, plus 1 MiB. */
void arena_release(size_t input_len);

#define malloc arena_malloc
#define calloc arena_calloc
#define realloc arena_realloc
#define reallocarray arena_reallocarray
#define free arena_free

#endif
